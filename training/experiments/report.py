"""The outputs of `training.experiments`: results.json, the paper-style figures, index.html and the reading.

Figures (matplotlib, Agg): `data_size.png` (Figures 3-4: test and few-shot accuracy against the number of
training images, log scale, error bars = std over seeds), `compute.png` (Figure 5: accuracy against the
training FLOPs spent, log scale) and Figure 7's three (`training.experiments.figure7`).
"""

from __future__ import annotations

import html
import json
import os

import numpy as np

from keras_vit import extras
from training.experiments import figure7
from training.experiments.models import STUDIES

# Imported with this module, before `training.experiments.app.run_studies` trains anything: a missing matplotlib
# stops the run at once, not after its runs.
matplotlib = extras.require("matplotlib", "inspect", "drawing the figures of training.experiments")

FIGURES = {"data_size": ["data_size.png"], "compute": ["compute.png"], "attention_distance": list(figure7.PLOTS)}
TITLES = {
    "data_size.png": "Accuracy against training-set size (Figures 3 and 4)",
    "compute.png": "Accuracy against training compute spent (Figure 5)",
    "attention_distance.png": "Mean attention distance of every head against depth (Figure 7, right)",
    "position_embeddings.png": "Similarity of the position embeddings (Figure 7, centre)",
    "embedding_filters.png": "Principal components of the embedding filters (Figure 7, left)",
}
"""The heading of each figure in index.html."""
_STYLE = {"vit": dict(marker="o", linestyle="-"), "bit": dict(marker="s", linestyle="--"),
          "hybrid": dict(marker="P", linestyle="-.")}
_COLOURS = {"vit_small": "#9ecae1", "vit_base": "#3182bd", "bit": "#636363", "hybrid": "#e6550d"}


def outputs(studies) -> list[str]:
    """The files `write` writes for `studies`."""
    return ["results.json"] + [f for s in STUDIES if s in studies for f in FIGURES[s]] + ["index.html"]


def _style(results, model):
    return dict(_STYLE[results["models"][model]["kind"]], color=_COLOURS.get(model, "black"))


def _pyplot():
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_data_size(plt, results, path):
    """Figures 3-4 in miniature: test and linear few-shot accuracy [%] against training images (log)."""
    study = data_size(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    shots = results["fewshot_shots"]
    for model, row in study.items():
        for axis, key in zip(axes, ("accuracy", "fewshot")):
            mean, std = (100 * np.array(v) for v in zip(*row[key]))
            axis.errorbar(row["train_examples"], mean, yerr=std, label=row["label"], capsize=3, markersize=5,
                          **_style(results, model))
    dataset = results["dataset"]
    for axis, what in zip(axes, ("Test accuracy [%]", f"Linear {shots}-shot accuracy [%]")):
        axis.set_xscale("log")
        axis.set_xlabel(f"Training images ({dataset['name']} {dataset['train_split']} subsets)")
        axis.set_ylabel(what)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    seeds = max(max(r["seeds"]) for r in study.values())
    budgets = ", ".join(f"{m['label']} {m['steps']}" for m in results["models"].values())
    bars = f"error bars: std over {seeds} seeds" if seeds > 1 else "one seed: no error bars"
    fig.suptitle(f"Accuracy against training-set size (steps per run: {budgets}; {bars})", fontsize=10)
    return fig


def plot_compute(plt, results, path):
    """Figure 5 in miniature: accuracy of the full-data runs against the training FLOPs they spent (log)."""
    study = compute(results)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    shots = results["fewshot_shots"]
    for axis, key in zip(axes, ("accuracy", "fewshot")):
        vits = [m for m in study if results["models"][m]["kind"] == "vit"]
        if len(vits) > 1:  # the ViT sizes as one family, as the paper's lines
            order = sorted(vits, key=lambda m: study[m]["train_flops"])
            axis.plot([study[m]["train_flops"] for m in order], [100 * study[m][key][0] for m in order],
                      color=_COLOURS["vit_base"], alpha=0.4)
        for model, row in study.items():
            style = _style(results, model)
            style.pop("linestyle")
            axis.errorbar(row["train_flops"], 100 * row[key][0], yerr=100 * row[key][1], capsize=3, markersize=7,
                          label=f"{row['label']} ({row['parameters'] / 1e3:.0f}k params)", linestyle="none",
                          **style)
        axis.set_xscale("log")
        axis.set_xlabel("Training compute [FLOPs] (3 x forward x images seen)")
        axis.set_ylabel("Test accuracy [%]" if key == "accuracy" else f"Linear {shots}-shot accuracy [%]")
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Accuracy against training compute spent, full training split", fontsize=10)
    return fig


def _save(fig, path):
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


# --- the reading -------------------------------------------------------------------------------------------


def _points(mean_std):
    return 100 * mean_std[0]


def _lead(a, b):
    """('20.0 points ahead', difference, noise) between two (mean, std) accuracies in [0, 1]."""
    diff = 100 * (a[0] - b[0])
    noise = 100 * (a[1] + b[1])
    text = f"{abs(diff):.1f} points {'ahead' if diff >= 0 else 'behind'}"
    return text + (" (within the seed spread)" if abs(diff) <= noise else ""), diff, noise


def _thousands(steps):
    return f"{steps:,}"


def cut_runs(results) -> str | None:
    """A sentence saying that the runs were cut short of their models' budgets (`--steps`), or None when every
    model ran its budget (or results.json predates the budgets, `models[...]["budget"]`)."""
    cut = {m: v for m, v in results["models"].items() if v.get("budget") and v["steps"] < v["budget"]}
    if not cut:
        return None
    shares = [v["steps"] / v["budget"] for v in cut.values()]
    share = f"{min(shares):.0%}" if f"{min(shares):.0%}" == f"{max(shares):.0%}" else \
        f"{min(shares):.0%}-{max(shares):.0%}"
    steps = sorted({v["steps"] for v in cut.values()})
    listing = ", ".join(f"{v['label']} {_thousands(v['steps'])} of {_thousands(v['budget'])}" for v in cut.values())
    runs = f"{_thousands(steps[0])} steps" if len(steps) == 1 else "fewer steps"
    return (f"These runs were cut to {runs} ({listing} steps: {share} of the budget), so the models are far from "
            "trained: every comparison and trend below is indicative only")


def _paragraph(sentences) -> str:
    return ". ".join(s[0].upper() + s[1:] for s in sentences) + "." if sentences else ""


def reading(results) -> str:
    """Short paragraphs read off the numbers, separated by blank lines: who leads at the smallest and the full
    training set and the trend (after a word on runs cut short of their budgets, `cut_runs`), the compute
    trade-off, the attention distances, and what this scale can and cannot show."""
    study = data_size(results)
    cut = cut_runs(results)
    sentences = [cut] if cut else []
    vits = [m for m in study if results["models"][m]["kind"] == "vit"]
    if "bit" in study and vits and len(study["bit"]["fractions"]) > 1:
        bit = study["bit"]
        small, large = 0, len(bit["fractions"]) - 1
        best = max(vits, key=lambda m: study[m]["accuracy"][-1][0])
        vit = study[best]
        text_small, gap_small, _ = _lead(bit["accuracy"][small], vit["accuracy"][small])
        text_large, gap_large, noise = _lead(bit["accuracy"][large], vit["accuracy"][large])
        sentences.append(
            f"On {results['dataset']['name']}, the ResNet (BiT) is {text_small} of the best ViT ({vit['label']}) in "
            f"test accuracy at {bit['train_examples'][small]} training images ({bit['fractions'][small]:.0%}: "
            f"{_points(bit['accuracy'][small]):.1f}% against {_points(vit['accuracy'][small]):.1f}%) and {text_large} "
            f"at {bit['train_examples'][large]} ({bit['fractions'][large]:.0%}: {_points(bit['accuracy'][large]):.1f}% "
            f"against {_points(vit['accuracy'][large]):.1f}%)")
        fs_small, _, _ = _lead(bit["fewshot"][small], vit["fewshot"][small])
        fs_large, _, _ = _lead(bit["fewshot"][large], vit["fewshot"][large])
        sentences.append(f"In {results['fewshot_shots']}-shot linear accuracy of the frozen features it is {fs_small} "
                         f"at the smallest subset and {fs_large} on the full split")
        if gap_small > 0 and gap_large < 0 and abs(gap_large) > noise:
            trend = ("the ViT overtakes the ResNet as the data grows, the crossing of the paper's Figures 3 and 4, "
                     "here at a toy scale")
        elif gap_small > gap_large + noise:
            trend = ("the ResNet's lead shrinks as the data grows: the direction of the paper's Figures 3-4 "
                     "(the CNN's inductive bias matters most with little data), without the crossing")
        elif gap_large > gap_small + noise:
            trend = ("the ResNet's lead grows with the data, against the paper's trend: at this scale the "
                     "convolutional bias helps at every size")
        else:
            trend = "the gap does not change beyond the seed spread across the subset sizes: no trend shows"
        sentences.append(f"So {trend}" + (" (indicative only: the runs were cut short)" if cut else ""))
    if "hybrid" in study and "vit_small" in study:
        text, _, _ = _lead(study["hybrid"]["accuracy"][0], study["vit_small"]["accuracy"][0])
        text_full, _, _ = _lead(study["hybrid"]["accuracy"][-1], study["vit_small"]["accuracy"][-1])
        sentences.append(f"The hybrid is {text} of the plain ViT-S in test accuracy at the smallest subset and "
                         f"{text_full} on the full split")
    paragraphs = [_paragraph(sentences)]
    sentences = []
    comp = compute(results)
    if len(comp) > 1:
        order = sorted(comp, key=lambda m: comp[m]["train_flops"])
        best = max(comp, key=lambda m: comp[m]["accuracy"][0])
        listing = ", ".join(f"{comp[m]['label']} {_points(comp[m]['accuracy']):.1f}% for {comp[m]['train_flops']:.2g}"
                            for m in order)
        text = (f"Against the training compute spent (full split, FLOPs = 3 x forward x images seen): {listing} FLOPs; "
                f"the most accurate is {comp[best]['label']}"
                + (", also the most expensive" if best == order[-1] else
                   f", at {comp[best]['train_flops'] / comp[order[-1]]['train_flops']:.2g}x the compute of the most "
                   f"expensive ({comp[order[-1]]['label']})"))
        if "hybrid" in comp and "vit_small" in comp:
            gain, _, _ = _lead(comp["hybrid"]["accuracy"], comp["vit_small"]["accuracy"])
            ratio = comp["hybrid"]["train_flops"] / comp["vit_small"]["train_flops"]
            text += f"; the hybrid's stem costs {ratio:.2g}x ViT-S's compute and puts it {gain}"
        sentences.append(text)
    paragraphs.append(_paragraph(sentences))
    sentences = []
    distances = attention_distance(results)
    figure7_sentences = figure7.sentences(results)  # distances, position embeddings, filters: a paragraph each
    if distances:
        if "hybrid" in distances and vits and any(m in distances for m in vits):
            plain = "vit_small" if "vit_small" in distances else [m for m in vits if m in distances][0]
            gap = distances[plain][0].mean() - distances["hybrid"][0].mean()
            if abs(gap) < 0.05 * results["uniform_attention_distance"]:
                verdict = "about as locally as", ": no difference at this scale"
            elif gap > 0:
                verdict = "more locally than", ", as in Figure 7"
            else:
                verdict = "less locally than", ", unlike Figure 7"
            sentences.append(f"the hybrid's first layer attends {verdict[0]} {results['models'][plain]['label']}'s "
                             f"({abs(gap):.1f} px apart on average){verdict[1]}")
    paragraphs.append(_paragraph(figure7_sentences[:1] + sentences))
    paragraphs += [_paragraph([sentence]) for sentence in figure7_sentences[1:]]
    n = results["dataset"]["train_examples"]
    params, steps = ([r[key] for r in results["runs"]] for key in ("parameters", "steps"))
    low, high = min(params) / 1e3, max(params) / 1e3
    size = f"{low:.0f}k" if f"{low:.0f}" == f"{high:.0f}" else f"{low:.0f}k-{high:.0f}k"
    runs = (f"{_thousands(min(steps))} steps" if min(steps) == max(steps)
            else f"{_thousands(min(steps))}-{_thousands(max(steps))} steps")
    seeds = results["setup"]["seeds"]
    noise = (f"with {seeds} seeds per point differences of a point or two are noise" if seeds > 1 else
             "with one seed per point there is no seed spread to judge differences by: a point or two may be noise")
    paragraphs.append(_paragraph([
        f"At this scale ({n} training images, models of about {size} parameters, {runs} a run) only the small-data "
        "end of the paper's curves is within reach: its crossover needs pre-training on 10^7-10^8 images "
        f"(ImageNet-21k, JFT-300M) and models of 10^8 parameters, and {noise}"]))
    return "\n\n".join(p for p in paragraphs if p)


# --- files -------------------------------------------------------------------------------------------------


def _mean_std(mean, std, seeds) -> str:
    """`97.8 ± 0.6` in percent; the mean alone for one seed (no spread to give)."""
    return f"{100 * mean:.1f} ± {100 * std:.1f}" if seeds > 1 else f"{100 * mean:.1f}"


def table_rows(results) -> list[dict]:
    """One row per (model, fraction): mean and std over seeds of the scores, FLOPs and wall time."""
    accuracy = aggregate(results["runs"], "accuracy")
    fewshot = aggregate(results["runs"], "fewshot_accuracy")
    wall = aggregate(results["runs"], "wall_time_s")
    rows = []
    for (model, fraction), (mean, std, seeds) in accuracy.items():
        run = next(r for r in results["runs"] if r["model"] == model and r["fraction"] == fraction)
        rows.append(dict(model=run["label"], fraction=fraction, train_examples=run["train_examples"], seeds=seeds,
                         accuracy=_mean_std(mean, std, seeds),
                         fewshot=_mean_std(*fewshot[model, fraction]),
                         parameters=run["parameters"], steps=run["steps"], train_flops=f"{run['train_flops']:.3g}",
                         wall_time_s=f"{wall[model, fraction][0]:.1f}"))
    return rows


def markdown_table(results) -> str:
    """The table of `table_rows` in Markdown."""
    shots = results["fewshot_shots"]
    head = ["model", "subset", "images", "seeds", "test acc. [%]", f"{shots}-shot [%]", "params", "steps",
            "train FLOPs", "wall s/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in table_rows(results):
        lines.append(f"| {r['model']} | {r['fraction']:.0%} | {r['train_examples']} | {r['seeds']} | {r['accuracy']} | "
                     f"{r['fewshot']} | {r['parameters']:,} | {r['steps']} | {r['train_flops']} | {r['wall_time_s']} |")
    return "\n".join(lines)


def write_html(results, path, studies):
    shots = results["fewshot_shots"]
    head = ["model", "subset", "images", "seeds", "test accuracy [%]", f"{shots}-shot linear [%]", "parameters",
            "steps", "training FLOPs spent", "wall time per run [s]"]
    rows = "\n".join(
        "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in (
            r["model"], f"{r['fraction']:.0%}", r["train_examples"], r["seeds"], r["accuracy"], r["fewshot"],
            f"{r['parameters']:,}", r["steps"], r["train_flops"], r["wall_time_s"])) + "</tr>"
        for r in table_rows(results))
    figures = "\n".join(f'<h2>{html.escape(TITLES[name])}</h2><img src="{name}" alt="{name}">'
                        for s in STUDIES if s in studies for name in FIGURES[s])
    reading_html = "\n".join(f"<p>{html.escape(p, quote=False)}</p>" for p in results["reading"].split("\n\n"))
    seeds = max(r["seeds"] for r in table_rows(results)) if results["runs"] else 0
    spread = "mean ± std over seeds" if seeds > 1 else "one seed each"
    heads = "\n".join("<tr>" + "".join(f"<td>{v}</td>" for v in (
        html.escape(r["model"]), r["layer"], r["head"], f"{r['distance_init']:.2f}", f"{r['distance']:.2f}",
        f"{r['entropy_init']:.3f}", f"{r['entropy']:.3f}")) + "</tr>" for r in figure7.head_rows(results))
    budgets = ", ".join(f"{html.escape(m['label'])} {m['steps']}" for m in results["models"].values())
    setup = results["setup"]
    text = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>keras_vit: the paper's experiments in miniature</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}img{{max-width:100%}}
table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}</style></head>
<body><h1>The paper's experiments in miniature</h1>
<p>{html.escape(results['dataset']['name'])}: {results['dataset']['train_examples']} training images
({html.escape(results['dataset']['train_split'])}), accuracy on {html.escape(results['dataset']['eval_split'])};
steps per run ({budgets}) of {setup['global_batch_size']} images at {setup['image_size']}x{setup['image_size']},
recipe {html.escape(results['recipe']['recipe'])}; {len(results['runs'])} runs in
{results['wall_time_s'] / 60:.1f} minutes. Every run: <a href="results.json">results.json</a>.</p>
<h2>Reading</h2>
{reading_html}
{figures}
<h2>Runs ({spread})</h2>
<table><tr>{''.join(f'<th>{html.escape(h)}</th>' for h in head)}</tr>
{rows}
</table>
<h2>Attention per head: distance [px] and entropy relative to uniform (1 = uniform), at initialisation and
trained (uniform attention: {results['uniform_attention_distance']:.2f} px)</h2>
<table><tr><th>model</th><th>layer</th><th>head</th><th>distance init</th><th>distance trained</th>
<th>entropy init</th><th>entropy trained</th></tr>
{heads}
</table></body></html>
"""
    with open(path, "w") as f:
        f.write(text)
    return path


def write(results, out, studies=STUDIES) -> list[str]:
    """Writes results.json, the figures of `studies` and index.html into `out`; returns the paths."""
    os.makedirs(out, exist_ok=True)
    paths = [os.path.join(out, "results.json")]
    with open(paths[0], "w") as f:
        json.dump(results, f, indent=2)
    plots = {"data_size.png": plot_data_size, "compute.png": plot_compute, **figure7.PLOTS}
    plt = _pyplot()
    for study in STUDIES:
        for name in FIGURES[study] if study in studies else ():
            paths.append(_save(plots[name](plt, results, os.path.join(out, name)), os.path.join(out, name)))
    paths.append(write_html(results, os.path.join(out, "index.html"), studies))
    return paths


# ------------------------------------------------------------------ the studies, summarised from the runs


def aggregate(runs, key="accuracy") -> dict:
    """{(model, fraction): (mean, std over seeds, number of seeds)} of a run field."""
    groups = {}
    for run in runs:
        groups.setdefault((run["model"], run["fraction"]), []).append(run[key])
    return {k: (float(np.mean(v)), float(np.std(v)), len(v)) for k, v in groups.items()}


def data_size(results: dict) -> dict:
    """The data-size study from the runs: per model, the subset sizes and mean/std accuracies over seeds."""
    runs = results["runs"]
    accuracy, shots = aggregate(runs, "accuracy"), aggregate(runs, "fewshot_accuracy")
    sizes = {r["fraction"]: r["train_examples"] for r in runs}
    study = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        fractions = sorted(f for m, f in accuracy if m == model)
        study[model] = dict(
            label=results["models"][model]["label"], fractions=fractions, train_examples=[sizes[f] for f in fractions],
            accuracy=[accuracy[model, f][:2] for f in fractions], fewshot=[shots[model, f][:2] for f in fractions],
            seeds=[accuracy[model, f][2] for f in fractions],
        )
    return study


def compute(results: dict) -> dict:
    """The compute study: per model, its training FLOPs and mean/std accuracies of the full-data runs."""
    runs = [r for r in results["runs"] if r["fraction"] == max(r2["fraction"] for r2 in results["runs"])]
    study = {}
    for model in dict.fromkeys(r["model"] for r in runs):
        mine = [r for r in runs if r["model"] == model]
        study[model] = dict(
            label=results["models"][model]["label"], family=results["models"][model]["family"],
            train_flops=mine[0]["train_flops"],
            forward_flops=mine[0]["forward_flops"], parameters=mine[0]["parameters"],
            accuracy=(float(np.mean([r["accuracy"] for r in mine])), float(np.std([r["accuracy"] for r in mine]))),
            fewshot=(float(np.mean([r["fewshot_accuracy"] for r in mine])),
                     float(np.std([r["fewshot_accuracy"] for r in mine]))),
            seeds=len(mine),
        )
    return study


def attention_distance(results: dict, when: str = "trained") -> dict:
    """The attention-distance study: {model: (layers, heads) mean attention distances in pixels}, of the trained
    models or (`when="init"`) at initialisation."""
    return {model: np.asarray(probe[when]["attention_distance"]) for model, probe in results.get("figure7", {}).items()
            if when in probe}
