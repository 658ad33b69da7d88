"""What every benchmark child process shares: the timing loop, peak memory and the result line.

Children print exactly one line starting with `RESULT_PREFIX` followed by JSON; everything else
they print (framework logs) is ignored by the parent.
"""

import json
import resource
import time

RESULT_PREFIX = "BENCH_RESULT "


def time_calls(fn, warmup, iters):
    """Calls `fn` `warmup` times untimed, then `iters` times timed; returns the seconds of each.

    `fn` must block until its result is computed (e.g. end with `.numpy()`).
    """
    for _ in range(warmup):
        fn()
    seconds = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - start)
    return seconds


def peak_rss_mb():
    """Peak resident memory of this process so far, in MiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def batch_result(seconds, batch):
    """The per-batch record a child reports: raw times, their median, and peak memory so far."""
    ordered = sorted(seconds)
    median = ordered[len(ordered) // 2] if len(ordered) % 2 else 0.5 * sum(ordered[len(ordered) // 2 - 1:][:2])
    return {"batch": batch, "seconds": seconds, "median_s": median, "peak_rss_mb": peak_rss_mb()}


def emit(result):
    """Prints the child's single result line."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)
