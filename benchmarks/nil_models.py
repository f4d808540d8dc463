"""Would another model over the NIL evidence lift the OKB C10 NIL F1 (issue 28: ≥ 0.85)? The six features of
``calibrate --nil classifier_pairs`` on one cached linking pass (:func:`nil_evidence.link`), fitted on docs 0-249
by each model, the threshold chosen there (≤ 1 pt in-KB R@1 loss), measured on docs 250-499: the protocol of
``benchmarks/accuracy.py``'s NIL section. Models: the pipeline's logistic regression over the features and their
pairwise products (at three regularisation strengths), gradient-boosted trees over the features
(scikit-learn's HistGradientBoostingClassifier) and small multi-layer perceptrons (three seeds averaged).

    python benchmarks/nil_models.py --pipeline OKB_PIPELINE --corpus OKB/bc5cdr_dev.spacy --output nil_models_okb
"""
from __future__ import annotations

from functools import partial

import numpy as np
import typer
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

from nil_evidence import arrays, fitting_rows, link, markdown, measure, pair_terms, standardise, write_report


def models(x: np.ndarray, train: np.ndarray, kb_side: np.ndarray) -> dict:
    """Each model's in-KB confidence for every mention, fitted on the ``train`` rows."""
    pairs, z = standardise(pair_terms(x), train), standardise(x, train)
    out = {f"logistic, features and pairwise products, C={c}" + (" (the pipeline's)" if c == 1.0 else ""):
           LogisticRegression(C=c, max_iter=5000).fit(pairs[train], kb_side[train]).predict_proba(pairs)[:, 1]
           for c in (0.1, 1.0, 10.0)}
    for lr, iters, leaf in ((0.05, 200, 20), (0.05, 100, 40), (0.1, 100, 20), (0.03, 300, 30)):
        trees = HistGradientBoostingClassifier(learning_rate=lr, max_iter=iters, min_samples_leaf=leaf, random_state=0)
        out[f"gradient-boosted trees, lr {lr}, {iters} trees, leaves ≥ {leaf}"] = trees.fit(x[train], kb_side[train]).predict_proba(x)[:, 1]
    for hidden in ((16,), (32, 16)):
        runs = [MLPClassifier(hidden_layer_sizes=hidden, alpha=1e-3, max_iter=2000, random_state=seed).fit(z[train], kb_side[train])
                .predict_proba(z)[:, 1] for seed in range(3)]
        out[f"perceptron, hidden {hidden}, 3 seeds averaged"] = np.mean(runs, 0)
    return out


def main(pipeline: str = typer.Option(..., help="the OKB C10 pipeline, uncalibrated"),
         corpus: str = typer.Option(..., help="BC5CDR dev relabelled for OKB C10"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    rows = link(pipeline, corpus)
    x, is_nil, in_kb, correct, doc = arrays(rows)
    runs = {name: measure(c, is_nil, in_kb, correct, doc) for name, c in models(x, fitting_rows(doc, in_kb, is_nil), ~is_nil).items()}
    write_report(rows, is_nil, doc, runs, notes, output, partial(markdown, title="NIL models over the six features", column="model"))


if __name__ == "__main__":
    typer.run(main)
