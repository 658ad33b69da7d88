"""The training app: flags -> frozen config -> strategy -> data -> model -> training loop -> export.

Run `python -m training.train` (see `training/train.py`); `training.data.make_dataset` is the reusable input
pipeline.
"""
