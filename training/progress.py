"""Progress of long work: step/total, images/s and time left, at a cadence that fits the run's length.

`Progress` prints one line per `every` steps (a Keras progress bar instead when stdout is a terminal),
with the first line early (by step 5) so a run shows its speed and ETA within seconds. The ETA divides
the steps left by the rate measured since the first step (which includes tracing and is not timed).

Example:
    >>> format_duration(3725), format_duration(75), format_duration(4.2)
    ('1h02m', '1m15s', '4s')
    >>> log_cadence(75), log_cadence(2000), log_cadence(100_000)
    (5, 100, 5000)
"""

from __future__ import annotations

import sys
import time

LINES_PER_RUN = 20  # lines a run prints when its cadence is chosen for it
FIRST_LINE_BY = 5  # the first line comes by this step


def format_duration(seconds: float) -> str:
    """A short human duration: '4s', '1m15s', '1h02m'."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def log_cadence(total_steps: int) -> int:
    """Steps between progress lines for a run of `total_steps`: about `LINES_PER_RUN` lines, on round numbers
    (1, 2 or 5 times a power of ten)."""
    target = max(1, total_steps // LINES_PER_RUN)
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= target:
                return step * factor
        step *= 10


def first_line_step(every: int) -> int:
    """The step of the first progress line: `every`, or earlier (`FIRST_LINE_BY`) for a long cadence."""
    return min(every, FIRST_LINE_BY)


class Progress:
    """Prints progress of `total` steps of `unit`s (e.g. images) every `every` steps.

    Args:
        total: steps of the whole run.
        every: steps between lines.
        start: the step the run (re)starts from.
        items_per_step: images per step, for the rate.
        enabled: False on workers that are not the chief.
        label: the first word of each line ("step", "eval batch").
        stream: where lines go (stdout).
    """

    def __init__(self, total, every, start=0, items_per_step=1, enabled=True, label="step", stream=None):
        self.total, self.every, self.start, self.items_per_step = total, max(1, every), start, items_per_step
        self.enabled, self.label = enabled, label
        self.stream = stream or sys.stdout
        self.interactive = enabled and self.stream.isatty()
        self.bar = None
        if self.interactive:
            import keras

            self.bar = keras.utils.Progbar(total, stateful_metrics=["loss", "lr", "img/s"])
        self.first_timed = None  # (time, step) after the first step: tracing is excluded from the rate

    def due(self, step: int) -> bool:
        """Whether `step` gets a line."""
        return (step % self.every == 0 or step == self.total
                or step == self.start + first_line_step(self.every))

    def rate_and_eta(self, step: int, now: float) -> tuple[float | None, float | None]:
        """(items per second, seconds left) from the steps timed so far, or (None, None) before two steps."""
        if self.first_timed is None:
            self.first_timed = (now, step)
            return None, None
        then, first_step = self.first_timed
        if step <= first_step or now <= then:
            return None, None
        seconds_per_step = (now - then) / (step - first_step)
        return self.items_per_step / seconds_per_step, seconds_per_step * (self.total - step)

    def update(self, step: int, now: float | None = None, **values) -> str | None:
        """Records that `step` finished; prints (and returns) its line when one is due."""
        if not self.enabled:
            return None
        now = time.perf_counter() if now is None else now
        rate, eta = self.rate_and_eta(step, now)
        if not self.due(step):
            return None
        if self.bar is not None:
            shown = dict(values, **({"img/s": rate} if rate is not None else {}))
            self.bar.update(step, values=list(shown.items()))
            return None
        line = self.line(step, rate, eta, values)
        print(line, file=self.stream, flush=True)
        return line

    def line(self, step, rate, eta, values) -> str:
        text = " ".join(f"{k}={v:.4g}" for k, v in values.items())
        speed = "" if rate is None else f" {rate:.0f} img/s"
        left = "" if eta is None else f" ETA {format_duration(eta)}"
        percent = 100.0 * step / self.total if self.total else 100.0
        return f"{self.label} {step}/{self.total} ({percent:.0f}%) {text}{speed}{left}".replace("  ", " ").rstrip()
