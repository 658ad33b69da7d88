"""benchmarks/train_quality.py's summary: accuracy gaps, wall and CPU ratios, against hand-computed values."""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import train_quality  # noqa: E402


def run(accuracy, wall, cpu):
    return {"accuracy": accuracy, "wall_s": wall, "cpu_s": cpu}


def test_report_gives_gaps_and_wall_and_cpu_ratios():
    results = {
        "shapes": {"app": [run(0.8, 40, 70), run(0.6, 60, 90)], "plain": [run(0.5, 50, 100), run(0.5, 50, 100)]},
        "mnist": {"app": [run(0.95, 110, 200)], "plain": [run(0.94, 100, 250)]},
    }
    table = train_quality.report(results, {})
    # shapes: app mean 0.70 against 0.50 -> +20 points; wall 50/50 = 1.00x; CPU 80/100 = 0.80x.
    assert "| shapes | app defaults - plain | +20.00 points | 1.00x | 0.80x | |" in table
    # mnist: +1 point; wall 110/100; CPU 200/250.
    assert "| mnist | app defaults - plain | +1.00 points | 1.10x | 0.80x | |" in table
    assert "mean gap over datasets +10.50 points; wall-time ratios 1.00x, 1.10x; CPU-time ratios 0.80x, 0.80x." in table
    assert "| shapes | app defaults | 0.7000 +- 0.1414 | 50 +- 14 | 80 +- 14 | 2 |" in table


def test_report_compares_each_app_runner_with_the_cnn():
    results = {"mnist": {"app": [run(0.97, 80, 150)], "conv": [run(0.99, 90, 160)], "plain": [run(0.96, 80, 150)],
                         "cnn": [run(0.985, 20, 40)]}}
    table = train_quality.report(results, {"conv": ["--tokenizer=conv"]})
    # app 0.97 - CNN 0.985 = -1.50 points; wall 80/20 = 4.00x; CPU 150/40 = 3.75x. conv: +0.50, 4.50x, 4.00x.
    assert "| mnist | app defaults - CNN | -1.50 points | 4.00x | 3.75x | |" in table
    assert "| mnist | app conv - CNN | +0.50 points | 4.50x | 4.00x | |" in table
    assert "| mnist | small Keras CNN | 0.9850 +- 0.0000 | 20 +- 0 | 40 +- 0 | 1 |" in table


def test_variants_need_a_new_name_and_flags():
    parser = train_quality.argparse.ArgumentParser()
    assert train_quality.parse_variants(["token=--classifier=token --epochs=2"], parser) == {
        "token": ["--classifier=token", "--epochs=2"]}
    with pytest.raises(SystemExit):
        train_quality.parse_variants(["plain=--epochs=2"], parser)


def test_report_compares_the_distilled_student_with_its_teacher_without_the_plain_script():
    results = {"fashion_mnist": {"app": [run(0.85, 100, 180)], "teacher": [run(0.88, 60, 110)],
                                 "distilled": [run(0.89, 130, 240)], "cnn": [run(0.87, 20, 40)]}}
    table = train_quality.report(results, {})
    # distilled 0.89 - teacher 0.88 = +1.00 points; wall 130/60 = 2.17x; CPU 240/110 = 2.18x
    assert "| fashion_mnist | app distilled student - teacher | +1.00 points | 2.17x | 2.18x | |" in table
    assert "| fashion_mnist | app distilled student - CNN | +2.00 points | 6.50x | 6.00x | |" in table
    assert "- plain" not in table and "| fashion_mnist | app teacher | 0.8800 +- 0.0000 | 60 +- 0 | 110 +- 0 | 1 |" in table


def test_report_compares_the_distiller_with_the_apps_distilled_student():
    results = {"mnist": {"teacher": [run(0.98, 50, 80)], "distilled": [run(0.97, 110, 180)],
                         "distiller": [run(0.965, 100, 150)]}}
    table = train_quality.report(results, {})
    # Distiller 0.965 - app distilled 0.97 = -0.50 points; wall 100/110 = 0.91x; CPU 150/180 = 0.83x
    assert "| mnist | Distiller model.fit - app distilled | -0.50 points | 0.91x | 0.83x | |" in table
    assert "| mnist | Distiller model.fit | 0.9650 +- 0.0000 | 100 +- 0 | 150 +- 0 | 1 |" in table
