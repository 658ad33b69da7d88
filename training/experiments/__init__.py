"""The paper's experiments in miniature, `python -m training.experiments` (docs/EXPERIMENTS.md).

Its modules (this `__init__` imports none of them, so a module costs only its own imports):

* `app`: the studies' `Setup`, `run_studies` and the command line (`FLAGS`, `main`; `__main__` runs it).
* `models`: the studies, the miniature models they compare, their step budgets and the presets.
* `data`: the splits, the check of a folder's images, the nested subsets and the training batches.
* `trainer`: the runs, trained with `model.fit` and scored (test, few-shot, FLOPs), Figure 7 measured.
* `probes`: Figure 7 measured on one model (attention distance, position embeddings, embedding filters).
* `report`: results.json, the figures, index.html and the reading; `figure7`: Figure 7's figures and sentences.
"""
