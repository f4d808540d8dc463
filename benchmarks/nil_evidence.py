"""Would more NIL evidence lift the OKB C10 NIL F1? Candidate features beside the pipeline's six, each fitted
as ``calibrate --nil classifier_pairs`` fits (the features and their pairwise products, standardised,
logistic regression) on docs 0-249 with the threshold chosen there (≤ 1 pt in-KB R@1 loss), and measured
on docs 250-499 — the protocol of ``benchmarks/accuracy.py``'s NIL section, re-implemented here on one
cached linking pass so that many feature sets cost one pass.

The candidates (none is in the pipeline; each would need only what the pipeline already holds):

* ``prior`` — log(1 + how often the best entity is a gold id in the training corpus's alias table);
* ``seen`` — the best entity is a gold id there at all;
* ``text_seen`` — the mention's normalised text is a surface form of the training corpus;
* ``coherent`` — another mention text of the same document has the same best entity;
* ``repeats`` — log of how often the mention's text occurs in its document;
* ``nwords`` — the mention's word count; ``short`` — an upper-case text of ≤ 5 characters.

    python benchmarks/nil_evidence.py --pipeline training/bench/acc32/okb/pipeline \\
        --corpus training/bench/okb32/bc5cdr_dev.spacy --aliases training/context32/aliases.json --output nil_evidence_okb
"""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Dict, List

import numpy as np
import spacy
import typer
from sklearn.linear_model import LogisticRegression

from _common import HERE, ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import NIL, gold_spans, read_docbin
from spacy_pel.evaluation.linking import mention_table
from spacy_pel.evaluation.nil import label_types, nil_curve
from spacy_pel.kb import normalize
from spacy_pel.pipeline.nil import FEATURES, ClassifierNil

FIT, HELD_OUT = (0, 250), (250, 500)
MAX_R1_LOSS = 0.01


def link(pipeline: str, corpus: str) -> List[dict]:
    """One linking pass over docs 0-499's gold mentions with every piece of evidence computed."""
    nlp = spacy.load(ROOT / pipeline)
    linker = nlp.get_pipe("pel_linker")
    docs = read_docbin(nlp, ROOT / corpus)[: HELD_OUT[1]]
    linker.ensure_loaded()
    linker.nil = ClassifierNil({}, 0.0, label_types(docs[FIT[0] : FIT[1]], linker.index))  # no weights: all evidence
    rows, _ = mention_table(linker, docs, progress=True, deep=0)
    spans = [(d, span.text) for d, doc in enumerate(docs) for span in gold_spans(doc)]
    return [{"doc": d, "text": text, "gold": gold, "best": cands[0] if cands else None, "features": [float(x) for x in feats],
             "in_kb": gold != [NIL] and any(g in linker.index.row for g in gold)}
            for (d, text), (gold, cands, _, _, feats) in zip(spans, rows)]


def arrays(rows: List[dict]):
    """The six features, and per mention: gold NIL, gold id in the KB, best candidate right, document number."""
    return (np.array([r["features"] for r in rows], np.float64), np.array([r["gold"] == [NIL] for r in rows]),
            np.array([r["in_kb"] for r in rows]), np.array([r["best"] in r["gold"] for r in rows]), np.array([r["doc"] for r in rows]))


def write_report(rows: List[dict], is_nil: np.ndarray, doc: np.ndarray, runs: dict, notes: str, output: str, render) -> None:
    """``benchmarks/<output>.json`` and its markdown by ``render``."""
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "command": invocation(), "mentions": len(rows),
              "nil_mentions": int(is_nil.sum()), "held_out_nil": int(is_nil[doc >= HELD_OUT[0]].sum()), "runs": runs, "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(render(report), encoding="utf8")


def candidates(rows: List[dict], aliases: Dict[str, Dict[str, int]]) -> Dict[str, np.ndarray]:
    """The candidate features of the module doc, one column each."""
    prior: Counter = Counter()
    for forms in aliases.values():
        prior.update(forms)
    texts = [normalize(r["text"]) for r in rows]
    linked_by = defaultdict(set)
    for r, text in zip(rows, texts):
        linked_by[(r["doc"], r["best"])].add(text)
    count = Counter((r["doc"], text) for r, text in zip(rows, texts))
    return {
        "prior": np.array([np.log1p(prior.get(r["best"], 0)) for r in rows]),
        "seen": np.array([float(prior.get(r["best"], 0) > 0) for r in rows]),
        "text_seen": np.array([float(text in aliases) for text in texts]),
        "coherent": np.array([float(len(linked_by[(r["doc"], r["best"])]) > 1) for r in rows]),
        "repeats": np.array([np.log(count[(r["doc"], text)]) for r, text in zip(rows, texts)]),
        "nwords": np.array([float(len(r["text"].split())) for r in rows]),
        "short": np.array([float(len(r["text"]) <= 5 and r["text"].isupper()) for r in rows]),
    }


def pair_terms(x: np.ndarray) -> np.ndarray:
    """The features and their pairwise products, as ``classifier_pairs`` fits them."""
    n = x.shape[1]
    return np.hstack([x, np.stack([x[:, i] * x[:, j] for i in range(n) for j in range(i, n)], 1)])


def standardise(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    mean, scale = x[train].mean(0), x[train].std(0)
    return (x - mean) / np.where(scale > 1e-9, scale, 1.0)


def fitting_rows(doc: np.ndarray, in_kb: np.ndarray, is_nil: np.ndarray) -> np.ndarray:
    """The mentions a NIL model is fitted on: the FIT docs' NIL and in-KB ones (not those whose id the KB lacks)."""
    return (doc >= FIT[0]) & (doc < FIT[1]) & (in_kb | is_nil)


def measure(confidence: np.ndarray, is_nil: np.ndarray, in_kb: np.ndarray, correct: np.ndarray, doc: np.ndarray) -> dict:
    """The threshold chosen on the FIT docs (≤ MAX_R1_LOSS), NIL P/R/F1 and the in-KB R@1 it costs on HELD_OUT."""
    fit, held = (doc >= FIT[0]) & (doc < FIT[1]), (doc >= HELD_OUT[0]) & (doc < HELD_OUT[1])
    threshold = nil_curve(confidence[fit], is_nil[fit], correct[fit], MAX_R1_LOSS)["threshold"]
    said, gold = confidence[held] < threshold, is_nil[held]
    tp = float((said & gold).sum())
    p, r = tp / max(said.sum(), 1), tp / max(gold.sum(), 1)
    lost = float((correct[held] & in_kb[held] & said).sum() / max(in_kb[held].sum(), 1))
    return {"p": round(p, 4), "r": round(r, 4), "f": round(2 * p * r / max(p + r, 1e-12), 4), "in_kb_r1_loss": round(lost, 4)}


def held_out_f1(x: np.ndarray, is_nil: np.ndarray, in_kb: np.ndarray, correct: np.ndarray, doc: np.ndarray) -> dict:
    """Fit on the FIT docs (features and pairwise products, standardised), threshold there, measure on HELD_OUT."""
    train = fitting_rows(doc, in_kb, is_nil)
    z = standardise(pair_terms(x), train)
    confidence = LogisticRegression(C=1.0, max_iter=5000).fit(z[train], ~is_nil[train]).predict_proba(z)[:, 1]
    return measure(confidence, is_nil, in_kb, correct, doc)


def markdown(report: dict, title: str = "NIL evidence beyond the six features", column: str = "evidence") -> str:
    lines = [f"# {title}: OKB C10", "", machine_line(report["machine"]) + ".", "",
             f"Reproduce: `{report['command']}`. {report['mentions']} gold mentions of docs 0-499 "
             f"({report['nil_mentions']} NIL, {report['held_out_nil']} of them in docs 250-499); fitted on docs 0-249, "
             "threshold there at ≤ 1 pt in-KB R@1 loss, measured on docs 250-499 (module doc).", "",
             f"| {column} | held-out NIL P | R | F1 | in-KB R@1 loss |", "|---|---:|---:|---:|---:|"]
    for name, m in report["runs"].items():
        lines.append(f"| {name} | {m['p']:.3f} | {m['r']:.3f} | **{m['f']:.4f}** | {m['in_kb_r1_loss']:.4f} |")
    if report.get("notes"):
        lines += ["", report["notes"]]
    return "\n".join(lines) + "\n"


def main(pipeline: str = typer.Option(..., help="the OKB C10 pipeline, uncalibrated"),
         corpus: str = typer.Option(..., help="BC5CDR dev relabelled for OKB C10"),
         aliases: str = typer.Option(..., help="the training corpus's alias table (the pipeline's aliases.json)"),
         output: str = typer.Option(..., help="report name in benchmarks/"), notes: str = typer.Option("")):
    rows = link(pipeline, corpus)
    extra = candidates(rows, json.loads((ROOT / aliases).read_text(encoding="utf8")))
    base, is_nil, in_kb, correct, doc = arrays(rows)
    sets = {f"the six ({', '.join(FEATURES)}): classifier_pairs": []} | {f"+ {k}": [k] for k in extra}
    sets |= {"+ prior, coherent, text_seen": ["prior", "coherent", "text_seen"], "+ all seven": list(extra)}
    runs = {name: held_out_f1(np.hstack([base] + [extra[k][:, None] for k in keys]), is_nil, in_kb, correct, doc)
            for name, keys in sets.items()}
    write_report(rows, is_nil, doc, runs, notes, output, markdown)

if __name__ == "__main__":
    typer.run(main)
