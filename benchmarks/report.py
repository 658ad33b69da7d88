"""Turns the children's raw results into rows, ceilings, peer ratios, goal checks, a table and JSON."""

import statistics

import flops
import model_matmuls
from cases import ARCHS, MATMUL_N


def _gflop_per_item(case, quick):
    if case.task == "matmul":
        return flops.matmul_gflop(MATMUL_N["quick" if quick else "full"])
    if case.task == "train-floor":  # what it computes: 3 forwards less the pixels' gradient
        return sum(p.gflop for p in model_matmuls.training_matmuls(ARCHS[case.arch], batch=1))
    forward = flops.arch_forward_gflop(ARCHS[case.arch])
    return forward * (flops.TRAIN_FORWARD_MULTIPLE if case.task == "train" else 1.0)


def build_rows(cases, results, quick):
    """One row per (case, batch size): medians over the repeats of each process's median time.

    Args:
        cases: the `Case`s that ran.
        results: {case name: [child result dict per repeat]} (failed repeats absent).
        quick: whether sizes were the --quick ones (for the FLOP counts).
    """
    rows = []
    for case in cases:
        runs = results.get(case.name, [])
        for batch in case.batches:
            per_repeat = [b for run in runs for b in run["batches"] if b["batch"] == batch]
            row = {
                "name": case.name, "runner": case.runner, "task": case.task, "dtype": case.dtype,
                "arch": case.arch, "mode": case.label, "batch": batch, "repeats": len(per_repeat),
            }
            if per_repeat:
                times = [b["median_s"] for b in per_repeat]
                median = statistics.median(times)
                gflop_item = _gflop_per_item(case, quick)
                row.update(
                    per_repeat_s=times,
                    median_s=median,
                    spread=(max(times) - min(times)) / median,
                    items_per_s=batch / median,
                    gflop_per_item=gflop_item,
                    gflops=gflop_item * batch / median,
                    peak_rss_mb=statistics.median(b["peak_rss_mb"] for b in per_repeat),
                    median_cpu_s=statistics.median(b.get("median_cpu_s") or 0.0 for b in per_repeat),
                    extra=runs[-1].get("extra", {}),
                )
            rows.append(row)
    ceilings = {}
    for row in rows:
        if row["task"] == "matmul" and "gflops" in row:
            ceilings[row["dtype"]] = max(ceilings.get(row["dtype"], 0.0), row["gflops"])
    for row in rows:
        if row["task"] != "matmul" and "gflops" in row and row["dtype"] in ceilings:
            row["ceiling_share"] = row["gflops"] / ceilings[row["dtype"]]
    return rows, ceilings


def _find(rows, **keys):
    return [r for r in rows if "items_per_s" in r and all(r[k] == v for k, v in keys.items())]


def peer_ratios(rows):
    """keras_vit's throughput over each peer's (and the SavedModel's over the Keras call), same work."""
    ratios = []
    for ours in _find(rows, runner="keras_vit"):
        if ours.get("mode", "").endswith("-alt"):
            continue
        if ours["task"] == "serve":
            for keras_call in _find(rows, runner="keras_vit", task="infer", dtype=ours["dtype"], batch=ours["batch"]):
                if not keras_call.get("mode", "").endswith("-alt"):
                    ratios.append(_ratio(f"SavedModel serving_default / keras_vit[{keras_call.get('mode')}]",
                                         ours, keras_call))
            continue
        for peer in _find(rows, task=ours["task"], arch=ours["arch"], dtype=ours["dtype"], batch=ours["batch"]):
            if peer["runner"] != "keras_vit":
                ratios.append(_ratio(f"keras_vit[{ours.get('mode')}] / {peer['runner']}[{peer.get('mode')}]", ours, peer))
    return ratios


def _cpu_ratio(a, b):
    """b's CPU seconds per item over a's: the throughput ratio a busy shared machine distorts least (the
    time a case waits for a core taken by another tenant is not counted); None without CPU times."""
    if not a.get("median_cpu_s") or not b.get("median_cpu_s"):
        return None
    return (b["median_cpu_s"] / b["batch"]) / (a["median_cpu_s"] / a["batch"])


def _ratio(what, a, b):
    return {
        "what": what, "task": a["task"], "dtype": a["dtype"], "batch": a["batch"],
        "a": a["name"], "b": b["name"], "ratio": a["items_per_s"] / b["items_per_s"], "cpu_ratio": _cpu_ratio(a, b),
    }


def _goal(text, value, target, higher_is_better=True, cpu_value=None):
    met = None if value is None else (value >= target if higher_is_better else value <= target)
    return {"goal": text, "value": value, "target": target, "met": met, "cpu_value": cpu_value}


def goals(rows, ceilings, big_batch):
    """The issue's targets (issue 15, bf16 round), computed from this run's rows (None where a row is missing)."""
    rows = [r for r in rows if not r.get("mode", "").endswith("-alt")]

    def one(**keys):
        found = _find(rows, **keys)
        return found[0] if found else None

    def best(found):
        return max(found, key=lambda r: r["items_per_s"]) if found else None

    def ratio(a, b):
        return a["items_per_s"] / b["items_per_s"] if a and b else None

    def cpu(a, b):
        return _cpu_ratio(a, b) if a and b else None

    out = []
    ours32 = one(runner="keras_vit", task="infer", dtype="float32", batch=big_batch)
    if ours32:
        peers32 = _find(rows, task="infer", dtype="float32", batch=big_batch)
        peer = best([r for r in peers32 if r["runner"] != "keras_vit"])
        out.append(_goal(f"float32 batch {big_batch}: >= 1.0x fastest peer (no regression)", ratio(ours32, peer), 1.0,
                         cpu_value=cpu(ours32, peer)))
    for batch in (big_batch, 1):
        # keras_vit's best bf16 call: the mixed_bfloat16 model or the one built with bf16 weights.
        ours = best(_find(rows, runner="keras_vit", task="infer", dtype="bfloat16", batch=batch))
        timm = one(runner="timm", task="infer", dtype="bfloat16", batch=batch)
        if ours:
            out.append(_goal(f"bfloat16 batch {batch}: >= 1.0x timm bf16 [{ours['mode']}]", ratio(ours, timm), 1.0,
                             cpu_value=cpu(ours, timm)))
            if batch == big_batch:
                out.append(_goal(f"bfloat16 batch {batch}: >= 1.1x timm bf16 (stretch)", ratio(ours, timm), 1.1,
                                 cpu_value=cpu(ours, timm)))
    for row in _find(rows, runner="keras_vit", task="infer", dtype="bfloat16", batch=big_batch):
        extra = row.get("extra", {})
        out.append(_goal(f"bfloat16 logits within 2e-2 relative (L2) of float32 [{row['mode']}]",
                         extra.get("logits_rel_l2_vs_float32"), 2e-2, higher_is_better=False))
        if "top1_agreement_vs_float32" in extra:
            out.append(_goal(f"bfloat16 top-1 agreement with float32 >= 99% ({extra.get('agreement_images')} images) "
                             f"[{row['mode']}]", extra["top1_agreement_vs_float32"], 0.99))
    for batch in (1, big_batch):
        served = one(runner="keras_vit", task="serve", dtype="bfloat16", batch=batch)
        if not served:
            continue
        keras_call = best(_find(rows, runner="keras_vit", task="infer", dtype="bfloat16", batch=batch))
        served32 = one(runner="keras_vit", task="serve", dtype="float32", batch=batch)
        out.append(_goal(f"bf16 SavedModel serving_default batch {batch}: >= 0.95x Keras bf16 call "
                         f"[{keras_call and keras_call['mode']}]", ratio(served, keras_call), 0.95,
                         cpu_value=cpu(served, keras_call)))
        out.append(_goal(f"bf16 SavedModel serving_default batch {batch}: >= 2x float32 SavedModel",
                         ratio(served, served32), 2.0, cpu_value=cpu(served, served32)))
    for dtype in ("float32", "bfloat16"):
        timm = one(runner="timm", task="train", dtype=dtype)
        # the torch backend's goal row is its default (rematerializing) one, as for TensorFlow
        trains = _find(rows, runner="keras_vit", task="train", dtype=dtype)
        for train in [r for r in trains if r["mode"] != "torch-stored"]:
            backend = " [torch backend]" if train["mode"] == "torch" else ""
            out.append(_goal(f"{dtype} training{backend}: >= 1.0x timm", ratio(train, timm), 1.0,
                             cpu_value=cpu(train, timm)))
            out.append(_goal(f"{dtype} training{backend} peak RSS <= 1.2x timm's (ratio)",
                             timm and train["peak_rss_mb"] / timm["peak_rss_mb"], 1.2, higher_is_better=False))
    return out


# The floor task of each model task: a forward's products, a training step's.
FLOOR_TASK = {"infer": "floor", "train": "train-floor"}


def _floor_runner(row):
    """The runner of the floor on the kernels `row` runs on: PyTorch's for timm and keras_vit's torch-backend
    training rows (modes `torch`, `torch-stored`), TensorFlow's for the others."""
    on_torch = row["runner"] == "timm" or (row["runner"] == "keras_vit" and row["mode"].startswith("torch"))
    return "torch_matmul" if on_torch else "matmul"


def floor_shares(rows):
    """For each inference and training row: the time its framework's matmul floor takes (the model's products
    alone, same shapes, dtype and batch) as a share of the row's time; what is left is everything else."""
    out = []
    for row in rows:
        if "items_per_s" not in row or row["task"] not in FLOOR_TASK or row.get("mode", "").endswith("-alt"):
            continue
        if row["runner"] not in ("keras_vit", "keras_hub", "timm"):
            continue
        for floor in _find(rows, task=FLOOR_TASK[row["task"]], runner=_floor_runner(row), dtype=row["dtype"],
                           batch=row["batch"]):
            out.append({"name": row["name"], "batch": row["batch"], "floor": floor["name"],
                        "share": floor["median_s"] / row["median_s"]})
    return out


def bounds(rows, big_batch):
    """The best ratios against a peer that any model on TensorFlow's kernels could reach in this run: the
    peer's time over the TensorFlow floor's (a goal above its bound cannot be met on TensorFlow). For
    training also the ratio of a model that spent the peer's own time outside the products (the peer's time
    less PyTorch's floor) on top of TensorFlow's floor: what matching timm's non-matmul work would give."""
    out = []
    for task, floor_task in FLOOR_TASK.items():
        for dtype in ("float32", "bfloat16"):
            tf_floor = _find(rows, task=floor_task, runner="matmul", dtype=dtype, batch=big_batch)
            if not tf_floor:
                continue
            tf_floor = tf_floor[0]["median_s"]
            peers = [r for r in _find(rows, task=task, dtype=dtype, batch=big_batch)
                     if r["runner"] in ("timm", "keras_hub") and not r.get("mode", "").endswith("-alt")]
            label = "" if task == "infer" else " training"
            for peer in peers:
                out.append({"what": f"{dtype}{label} batch {big_batch}: TensorFlow matmul floor / {peer['name']}",
                            "ratio": peer["median_s"] / tf_floor})
                torch_floor = _find(rows, task=floor_task, runner="torch_matmul", dtype=dtype, batch=big_batch)
                if task == "train" and peer["runner"] == "timm" and torch_floor:
                    outside = peer["median_s"] - torch_floor[0]["median_s"]
                    out.append({"what": f"{dtype}{label} batch {big_batch}: (TensorFlow matmul floor + timm's time "
                                        f"outside its products) / {peer['name']}",
                                "ratio": peer["median_s"] / (tf_floor + outside)})
    return out


def _fmt(value, spec, missing="-"):
    return missing if value is None else format(value, spec)


def table(rows, ceilings, ratios, goal_rows, shares=(), bound_rows=()):
    """The human-readable report: one table, then ratios and goals.

    `cpu/wall` is the process's CPU seconds per wall second during the timed calls: about the number of
    cores a case kept busy (2 at most here); well below that on an idle machine means waiting.
    """
    width = max([42] + [len(r["name"]) for r in rows])
    header = (f"{'case':{width}} {'batch':>5} {'ms/iter':>9} {'spread':>6} {'items/s':>8} {'GFLOP/s':>8} "
              f"{'%ceil':>6} {'peakMiB':>8} {'cpu/wall':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        if "median_s" not in r:
            lines.append(f"{r['name']:{width}} {r['batch']:>5} FAILED (no successful repeat)")
            continue
        share = r.get("ceiling_share")
        lines.append(
            f"{r['name']:{width}} {r['batch']:>5} {r['median_s'] * 1e3:9.1f} {r['spread'] * 100:5.0f}% "
            f"{r['items_per_s']:8.2f} {r['gflops']:8.0f} {_fmt(share and share * 100, '5.0f'):>5}% "
            f"{r['peak_rss_mb']:8.0f} {r['median_cpu_s'] / r['median_s']:8.2f}"
        )
    lines.append("")
    lines.append("ceilings (GFLOP/s): " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(ceilings.items())))
    if ratios:
        lines.append("ratios (throughput, same work; >1 means the first is faster):")
        for q in ratios:
            cpu_text = f" (CPU time: {q['cpu_ratio']:.2f}x)" if q.get("cpu_ratio") else ""
            lines.append(f"  {q['what']:38} {q['task']:6} {q['dtype']:9} batch {q['batch']:>3}: {q['ratio']:.2f}x"
                         + cpu_text)
    if shares:
        lines.append("matmul floor (the model's matrix products alone, its framework's kernels) / model time:")
        for f in shares:
            lines.append(f"  {f['name']:44} batch {f['batch']:>3}: {f['share']:.0%}")
    if bound_rows:
        lines.append("best reachable on TensorFlow (a model that took only the TensorFlow floor's time):")
        for b in bound_rows:
            lines.append(f"  {b['what']}: {b['ratio']:.2f}x")
    if goal_rows:
        lines.append("goals (issue 15):")
        for g in goal_rows:
            status = {True: "MET", False: "MISSED", None: "n/a"}[g["met"]]
            cpu_text = f"; by CPU time {g['cpu_value']:.3f}" if g.get("cpu_value") else ""
            lines.append(f"  {status:6} {g['goal']}: {_fmt(g['value'], '.3f')} (target {g['target']}{cpu_text})")
    for r in rows:
        extra = {k: v for k, v in r.get("extra", {}).items() if k != "path"}
        if extra and r["batch"] != 1:
            lines.append(f"  {r['name']}: " + ", ".join(f"{k}={_fmt_extra(v)}" for k, v in extra.items()))
    return "\n".join(lines)


def _fmt_extra(value):
    if isinstance(value, float):
        return _fmt(value, ".2e") if abs(value) < 1e-2 or abs(value) >= 1e5 else _fmt(value, ".4g")
    if isinstance(value, dict) and all(isinstance(v, dict) and "rss_mb" in v for v in value.values()):
        stages = ", ".join(f"{k}: {v['rss_mb']:.0f}/{v['peak_mb']:.0f}" for k, v in value.items())
        return "{" + stages + "} (MiB now/peak)"
    return value


def markdown(document, text):
    """RESULTS.md: when, where and how the table was made, then the table itself."""
    machine = document["machine"]
    load = ", ".join(f"{a:.2f}" for a in machine["load_average_at_start"])
    load_end = ", ".join(f"{a:.2f}" for a in machine["load_average_at_end"])
    return "\n".join([
        "# Benchmark results",
        "",
        f"- date: {document['date']} (took {document['elapsed_s'] / 60:.1f} min)",
        f"- machine: {machine['cpu_model']}, {machine['cores']} cores, {' '.join(machine.get('isa', []))} "
        f"({machine['platform']})",
        f"- load average (1, 5, 15 min) at start: {load}; at end: {load_end}",
        *([f"- CPU time stolen by the hypervisor during the run: {machine['steal_share']:.1%} of busy + stolen "
           "(/proc/stat; noise from other tenants of the host)"] if machine.get("steal_share") is not None else []),
        *([f"- keras_vit ran in `{document['pythons']['keras_vit']}`, peers in `{document['pythons']['peers']}`"]
          if document.get("pythons") else []),
        f"- command: `{document['command']}`",
        f"- repeats: {document['repeats']} (interleaved, each case in a fresh process); peers: "
        f"{', '.join(document['peers']) or 'none'}",
        "- ratios and goals are throughput (wall time); `CPU time` beside them is the same ratio from the "
        "processes' CPU seconds per item, which a loaded shared machine distorts less (waiting for a core is "
        "not counted; spinning threads and shared caches still are)",
        *[f"- note: {note}" for note in document.get("notes", [])],
        "",
        "```text",
        text,
        "```",
        "",
    ])
