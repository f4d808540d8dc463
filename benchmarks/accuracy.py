"""Issue #14's acceptance table: accuracy where users feel it, for the pipeline as the ``all``
workflow assembles it (optionally with more candidate rules appended: name-level rows, re-ranker).

Sections (``--sections``; the others are copied from the previous report):

* ``dev`` — BC5CDR dev gold mentions vs all MeSH: R@1, R@64, seen / unseen-entity R@1, mentions/s
  (R@1 and NIL as the pipeline links, with its ``top_k``; R@64 from a deeper second pass);
* ``nil`` — NIL decision fitted on dev docs 0-249 and applied to docs 250-499, both on BC5CDR dev
  (its real NIL mentions) and in the OKB C10 setting (every MeSH record under C10 removed from the KB,
  its mentions relabelled NIL): NIL P/R/F1 and auPR on the held-out docs, with the in-KB R@1 that the
  NIL decisions cost; strategies: the top-score threshold and the NIL classifier (over the evidence,
  and over the evidence and its pairwise products), each with the threshold free and bounded to
  ≤ 1 pt in-KB R@1 loss on the fitting docs;
* ``ncbi`` — transfer: NCBI disease dev gold mentions vs MEDIC (11,915 concepts), the same retriever
  and BC5CDR train surface forms (trained on BC5CDR only).

    python benchmarks/accuracy.py --pipeline training/pipeline --okb-kb OKB/kb --work /tmp/acc
"""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path
from typing import List, Optional

import numpy as np
import spacy
import typer

from _common import machine  # noqa: E402
from spacy_pel.corpora import NIL, convert, corpus_ids, read_docbin  # noqa: E402
from spacy_pel.evaluation import nil as nil_fitting  # noqa: E402
from spacy_pel.evaluation.linking import canonical_ids, mention_table, metrics  # noqa: E402
from spacy_pel.evaluation.metrics import shown  # noqa: E402
from spacy_pel.evaluation.nil import calibrate  # noqa: E402
from spacy_pel.pipeline import nil as nil_strategies  # noqa: E402
from spacy_pel.pipeline.linker import find_linker  # noqa: E402
from spacy_pel.pipeline.retarget import name_row_rules  # noqa: E402
from spacy_pel.pipeline.rules.name_rows import NAMES_FOLDER  # noqa: E402
from spacy_pel.retrieval.build import build_kb  # noqa: E402
from spacy_pel.retrieval.index import EntityIndex  # noqa: E402
from spacy_pel.retrieval.names import NameIndex, build_names  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
SECTIONS = ("dev", "nil", "ncbi")
FIT, HELD_OUT = (0, 250), (250, 500)
NIL_RUNS = [("top score, free threshold", "top_score", None), ("top score, ≤ 1 pt R@1 loss", "top_score", 0.01),
            ("NIL classifier, free threshold", "classifier", None), ("NIL classifier, ≤ 1 pt R@1 loss", "classifier", 0.01),
            ("NIL classifier with pairwise terms, free threshold", "classifier_pairs", None),
            ("NIL classifier with pairwise terms, ≤ 1 pt R@1 loss", "classifier_pairs", 0.01)]
CLASSIFIER_RUNS = ("NIL classifier", "NIL classifier with pairwise terms")  # the runs above whose weights and OKB row are shown


def names_for(pipeline: Path, kb: Path, work: Path, rule: str) -> Path:
    """A name index for ``kb`` and the name-rows rule at config path ``rule``: the pipeline's own, cut down
    to ``kb``'s entities where ``kb`` is part of the pipeline's KB (OKB) and encoded by the same entity
    tower, else built with ``kb``'s encoder (MEDIC)."""
    out = work / f"names_{kb.name}"
    if not (out / "meta.json").exists():
        linker = pipeline / rule.split(".")[1]  # the linker's folder: its KB and name rows
        own = NameIndex.from_disk(linker / NAMES_FOLDER)
        target = EntityIndex.from_disk(kb)
        try:
            if own.fingerprint != target.fingerprint:  # another entity tower encoded kb: its own name rows
                raise ValueError("another encoder")
            own.for_kb(EntityIndex.from_disk(linker / "kb").entities.ids, target.entities.ids).to_disk(out)
        except ValueError:
            build_names(kb, out, progress=True)
    return out


def load(pipeline: Path, kb: Optional[Path] = None, work: Optional[Path] = None, settings: Optional[dict] = None):
    """The pipeline, linking against ``kb`` if given (its name-row rules get a name index for it), with
    ``settings`` (config overrides) applied at load."""
    config = dict(settings or {})
    if kb:
        config["components.pel_linker.kb"] = str(kb)
        for rule in name_row_rules(pipeline):
            config[f"{rule}.names"] = str(names_for(pipeline, kb, work, rule))
    nlp = spacy.load(pipeline, config=config)
    return nlp, find_linker(nlp)[1]


def dev_section(pipeline: Path, kb: Optional[Path], dev: Path, train: Path, work: Optional[Path] = None) -> dict:
    nlp, linker = load(pipeline, kb, work)
    linker.ensure_loaded()
    docs = read_docbin(nlp, dev)
    train_ids = canonical_ids(linker, corpus_ids(read_docbin(nlp, train)))
    mention_table(linker, docs[:16])  # warm-up
    rows, seconds = mention_table(linker, docs, progress=True)
    return metrics(rows, seconds, linker.index.row, train_ids, None)


def held_out(pipeline: Path, corpus: Path) -> dict:
    """NIL and in-KB figures of a calibrated pipeline on the held-out docs (a null threshold, what calibrate's
    ``--max-r1-loss`` gives when no cut keeps the loss in bound: nothing NIL, R@1 with NIL = without)."""
    nlp, linker = load(pipeline)
    docs = read_docbin(nlp, corpus)[HELD_OUT[0] : HELD_OUT[1]]
    rows, _ = mention_table(linker, docs, progress=True)
    report = metrics(rows, 1.0, linker.index.row, None, linker.threshold)
    in_kb = [r for r in rows if r[0] != [NIL] and any(g in linker.index.row for g in r[0])]
    right = [r[1][0] in r[0] for r in in_kb]
    threshold = linker.threshold
    kept = [ok and (threshold is None or r[3] >= threshold) for ok, r in zip(right, in_kb)]
    return {"nil": report["nil"], "nil_mentions": report["counts"]["nil"], "in_kb": len(in_kb),
            "in_kb_R@1_without_nil": round(float(np.mean(right)), 4), "in_kb_R@1_with_nil": round(float(np.mean(kept)), 4)}


def nil_section(pipeline: Path, kb: Optional[Path], corpus: Path, work: Path) -> dict:
    """Fit each NIL run on docs 0-249 of ``corpus`` and measure it on docs 250-499."""
    base = work / "pipeline"
    # what this folder's work was made from: another pipeline, KB or corpus → the old work is discarded
    inputs = json.dumps({"config": (pipeline / "config.cfg").read_text(encoding="utf8"), "kb": str(kb), "corpus": str(corpus)})
    stamp = work / "inputs.json"
    if work.exists() and (not stamp.exists() or stamp.read_text(encoding="utf8") != inputs):
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(inputs, encoding="utf8")
    if not (base / "config.cfg").exists():
        load(pipeline, kb, work)[0].to_disk(base)
    # the fitted runs also depend on the NIL code (its features): other code → they are fitted again
    code = json.dumps({m.__name__: hashlib.sha256(Path(m.__file__).read_bytes()).hexdigest() for m in (nil_strategies, nil_fitting)})
    code_stamp = work / "code.json"
    if not code_stamp.exists() or code_stamp.read_text(encoding="utf8") != code:
        for label, strategy, loss in NIL_RUNS:
            shutil.rmtree(work / f"{strategy}_{loss}", ignore_errors=True)
        code_stamp.write_text(code, encoding="utf8")
    out = {}
    for label, strategy, loss in NIL_RUNS:
        fitted = work / f"{strategy}_{loss}"
        done = fitted / "nil_calibration.json"  # a finished calibration from an earlier run of the same inputs
        summary = json.loads(done.read_text()) if done.exists() else calibrate(base, corpus, fitted, docs=FIT, nil=strategy, max_r1_loss=loss)
        out[label] = {"fit": {k: summary[k] for k in ("threshold", "p", "r", "f", "in_kb_r1_loss", "average_precision")},
                      "classifier": summary.get("classifier"), "held_out": held_out(fitted, corpus)}
    return out


def ncbi_section(pipeline: Path, work: Path, train: Path) -> dict:
    medic = SHARED / "ncbi-disease" / "medic_06Jul2012.txt"
    corpus = work / "ncbi_dev.spacy"
    convert(SHARED / "ncbi-disease" / "NCBIdevelopset_corpus.txt", corpus)
    name, _ = find_linker(spacy.load(pipeline))
    kb = work / "medic_kb"
    if not (kb / "meta.json").exists():  # encoded by the pipeline's own encoder
        build_kb(medic, kb, "medic", str(pipeline / name / "encoder"), precision="auto", progress=True)
    return dev_section(pipeline, kb, corpus, train, work)


def fmt_nil(r: dict) -> str:
    h, threshold = r["held_out"], r["fit"]["threshold"]
    return (f"{shown(h['nil']['p'])} / {shown(h['nil']['r'])} / **{shown(h['nil']['f'])}** | {shown(h['nil']['average_precision'])} | "
            f"{h['in_kb_R@1_without_nil']:.3f} → {h['in_kb_R@1_with_nil']:.3f} | {'none' if threshold is None else shown(threshold)}")


def markdown(report: dict) -> str:
    dev, ncbi, nil = report.get("dev"), report.get("ncbi"), report.get("nil", {})
    lines = ["# Accuracy where users feel it (issue #14): BC5CDR dev vs all MeSH, NIL, transfer", "",
             "Written by " + "; ".join(f"{section}: `python benchmarks/accuracy.py {cmd}`" for section, cmd in report.get("commands", {}).items())
             + f". Machine: {report['machine']['cpu']} "
             f"({', '.join(report['machine']['flags'])}), torch {report['machine']['torch']}.", "",
             "| measure | round 1 | target | now |", "|---|---|---|---|"]
    if dev:
        r, u = dev["recall_in_kb"], dev.get("recall_unseen", {})
        lines += [f"| R@1, BC5CDR dev gold mentions in the KB ({dev['counts']['in_kb']}) | 0.908 | ≥ 0.95 | {r['R@1']:.4f} |",
                  f"| unseen-entity R@1 ({dev['counts'].get('unseen', 0)}) | 0.799 | ≥ 0.88 | {u.get('R@1', 0):.4f} |",
                  f"| R@64 | 0.964 | ≥ 0.99 | {r['R@64']:.4f} |"]
    for run in CLASSIFIER_RUNS:
        okb = nil.get("okb", {}).get(f"{run}, ≤ 1 pt R@1 loss")
        if okb:
            h = okb["held_out"]
            lines.append(f"| NIL F1, OKB C10 held-out docs 250-499 (in-KB R@1 loss ≤ 1 pt), {run} | 0.45–0.48 (retriever alone) | ≥ 0.60 | "
                         f"{shown(h['nil']['f'])} (R@1 {h['in_kb_R@1_without_nil']:.3f} → {h['in_kb_R@1_with_nil']:.3f}) |")
    if ncbi:
        lines.append(f"| NCBI disease dev vs MEDIC, trained on BC5CDR only: R@1 ({ncbi['counts']['in_kb']} in-KB mentions) | – | ≥ 0.90 | "
                     f"{ncbi['recall_in_kb']['R@1']:.4f} |")
    if dev:
        lines.append(f"| whole-pipeline mentions/s (this run's linker) | – | ≥ 1,000 | {dev['mentions_per_s']:,.0f} |")
    for key, title in (("okb", "OKB C10 (MeSH branch C10 removed; its dev mentions relabelled NIL)"), ("dev", "BC5CDR dev (its real NIL mentions)")):
        if key in nil:
            lines += ["", f"## NIL on {title}: fitted on docs 0-249, measured on docs 250-499", "",
                      "| NIL decision | NIL P / R / F1 | NIL auPR | in-KB R@1 without → with NIL | threshold |", "|---|---|---|---|---|"]
            lines += [f"| {label} | {fmt_nil(r)} |" for label, r in nil[key].items()]
            for run in CLASSIFIER_RUNS:
                clf = nil[key].get(f"{run}, free threshold", {}).get("classifier")
                if clf:
                    lines.append(f"\n{run}, weights (fitted): {clf['weights']}, bias {clf['bias']}; label types: {clf['label_types']}.")
    lines += ["", "R@1 and the NIL decisions are the pipeline's own (its `top_k` candidates, as `nlp(doc)` links); "
              "R@64 adds the candidates of a second pass with 64 (`spacy_pel.evaluation.linking.mention_table`).",
              "", report.get("notes", "")]
    return "\n".join(lines) + "\n"


def main(
    pipeline: Path = typer.Option(..., help="The pipeline as `all` assembles it (rules included)"),
    okb_kb: Path = typer.Option(..., help="The OKB C10 KB (python -m spacy_pel okb --remove C10)"),
    okb_dev: Path = typer.Option(..., help="BC5CDR dev relabelled for OKB C10"),
    work: Path = typer.Option(Path("/tmp/pel_accuracy"), help="Scratch folder"),
    dev: Path = typer.Option(ROOT / "corpus" / "bc5cdr_dev.spacy"),
    train: Path = typer.Option(ROOT / "corpus" / "bc5cdr_train.spacy"),
    sections: List[str] = typer.Option(list(SECTIONS), help="Sections to measure"),
    output: Path = typer.Option(ROOT / "benchmarks" / "accuracy", help="Report path without suffix"),
    notes: str = typer.Option("", help="Notes for the report"),
):
    out_json = output.with_suffix(".json")
    report = json.loads(out_json.read_text()) if out_json.exists() else {}
    report.update({"machine": machine(), "notes": notes or report.get("notes", "")})
    report.pop("args", None), report.pop("runs", None)  # older reports: one command line for all sections
    work.mkdir(parents=True, exist_ok=True)
    measure = {"dev": lambda: dev_section(pipeline, None, dev, train),
               "nil": lambda: {"okb": nil_section(pipeline, okb_kb, okb_dev, work / "okb"), "dev": nil_section(pipeline, None, dev, work / "dev")},
               "ncbi": lambda: ncbi_section(pipeline, work, train)}
    for section in SECTIONS:
        if section in sections:
            report[section] = measure[section]()
            report.setdefault("commands", {})[section] = " ".join(sys.argv[1:])
            out_json.write_text(json.dumps(report, indent=2), encoding="utf8")  # each section as soon as it is measured
            output.with_suffix(".md").write_text(markdown(report), encoding="utf8")


if __name__ == "__main__":
    typer.run(main)
