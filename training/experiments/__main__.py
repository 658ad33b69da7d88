"""`python -m training.experiments`: the command line of `training.experiments.app` (its docstring is the
`--help` text)."""

from keras_vit import cli
from training.experiments import app

if __name__ == "__main__":
    cli.run(app.run, app.FLAGS, usage=app.__doc__, tensorflow=True)
