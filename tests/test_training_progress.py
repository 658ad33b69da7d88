"""Progress lines of the training app (training/progress.py): durations, cadence, ETA."""

import io

import pytest

from training.progress import Progress, format_duration, log_cadence


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (4.4, "4s"), (59.6, "1m00s"), (75, "1m15s"),
                                           (3599, "59m59s"), (3725, "1h02m"), (-3, "0s")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("total, every", [(1, 1), (19, 1), (75, 5), (400, 20), (2000, 100), (3000, 200),
                                          (10_000, 500), (100_000, 5000)])
def test_cadence_gives_about_twenty_lines_on_round_numbers(total, every):
    assert log_cadence(total) == every


def test_lines_show_step_total_rate_and_eta_with_an_early_first_line():
    stream = io.StringIO()
    progress = Progress(total=400, every=100, items_per_step=32, stream=stream)
    for step in range(1, 401):  # 0.5 s per step after the first: 64 images/s
        progress.update(step, now=10.0 + 0.5 * step, loss=0.5)
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["5/400", "100/400", "200/400", "300/400", "400/400"]
    assert lines[0] == "step 5/400 (1%) loss=0.5 64 img/s ETA 3m18s"  # 395 steps left x 0.5 s
    assert lines[-1].endswith("ETA 0s")


def test_a_resumed_run_times_from_its_own_start():
    stream = io.StringIO()
    progress = Progress(total=100, every=50, start=60, items_per_step=10, stream=stream)
    for step in range(61, 101):
        progress.update(step, now=float(step))  # 1 s per step
    lines = stream.getvalue().splitlines()
    assert lines[0] == "step 65/100 (65%) 10 img/s ETA 35s"
    assert lines[-1].startswith("step 100/100 (100%)")


def test_disabled_progress_prints_nothing():
    stream = io.StringIO()
    progress = Progress(total=10, every=1, enabled=False, stream=stream)
    for step in range(1, 11):
        progress.update(step, now=float(step))
    assert stream.getvalue() == ""


@pytest.mark.parametrize("warmup, total, used", [(100, 2000, 100), (100, 400, 100), (100, 399, 39), (100, 75, 7),
                                                 (5, 3, 1), (0, 10, 0)])
def test_a_warmup_over_a_quarter_of_the_run_is_clamped_to_a_tenth(warmup, total, used):
    from training.optim import fitted_warmup

    steps, note = fitted_warmup(warmup, total)
    assert steps == used
    assert (note is None) == (used == warmup)
    if note:
        assert f"{warmup} steps" in note and f"clamped to {used}" in note


def test_a_short_run_decays_after_its_clamped_warmup():
    import keras

    from training.config import make_config
    from training.optim import make_optimizer

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    optimizer = make_optimizer(make_config("demo", steps=75, warmup_steps=100), 75, model)
    rates = [float(optimizer._learning_rate(step)) for step in (0, 7, 40, 75)]
    assert rates[1] == pytest.approx(1e-3) and rates[2] < 1e-3 and rates[3] == pytest.approx(0.0, abs=1e-9)
