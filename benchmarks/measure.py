"""What every benchmark child process shares: the timing loop, peak memory and the result line.

Children print exactly one line starting with `RESULT_PREFIX` followed by JSON; everything else
they print (framework logs) is ignored by the parent.
"""

import json
import resource
import time

RESULT_PREFIX = "BENCH_RESULT "


def time_calls(fn, warmup, iters):
    """Calls `fn` `warmup` times untimed, then `iters` times timed; returns the wall seconds of each.

    `fn` must block until its result is computed (e.g. end with `.numpy()`). The process CPU seconds of
    the timed calls are kept too (`last_cpu_seconds`): on a shared machine they show the work done
    independently of the time waited for a core.
    """
    for _ in range(warmup):
        fn()
    seconds, cpu = [], []
    for _ in range(iters):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        seconds.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    last_cpu_seconds[:] = cpu
    return seconds


last_cpu_seconds = []


def peak_rss_mb():
    """Peak resident memory of this process so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def current_rss_mb():
    """Resident memory of this process now, in MiB (/proc/self/statm; the peak where that is missing)."""
    try:
        with open("/proc/self/statm") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return peak_rss_mb()
    return pages * resource.getpagesize() / 2**20


def memory_stages():
    """A recorder of (stage, current MiB, peak MiB so far): where a process's resident memory comes from."""
    stages = {}

    def record(stage):
        stages[stage] = {"rss_mb": round(current_rss_mb(), 1), "peak_mb": round(peak_rss_mb(), 1)}
        return stages

    return record


def batch_result(seconds, batch):
    """The per-batch record a child reports: raw times, their median, and peak memory so far."""
    ordered = sorted(seconds)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else 0.5 * sum(ordered[len(ordered) // 2 - 1:][:2])
    cpu = sorted(last_cpu_seconds)
    return {"batch": batch, "seconds": seconds, "median_s": median, "peak_rss_mb": peak_rss_mb(),
            "median_cpu_s": cpu[len(cpu) // 2] if cpu else None}


def emit(result):
    """Prints the child's single result line."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)
