"""BioC input vs PubTator on BC5CDR dev: the same corpus written as BioC XML and BioC JSON (by the PyPI
``bioc`` library, from the PubTator documents: a title passage and an abstract passage, the CID
relations as typed relations), each converted by ``spacy_pel.corpus_formats.convert_corpora`` as
``python -m spacy_pel convert`` does, compared with the PubTator route document by document: tokens,
gold spans (offsets, labels, kb ids), ``doc.ents``, counts.

    python benchmarks/bioc_roundtrip.py [--pubtator ../shared/data/bc5cdr/CDR_DevelopmentSet.PubTator.txt]

Writes benchmarks/bioc_roundtrip.md and benchmarks/bioc_roundtrip.json. Light: a few seconds, no model.
"""
import argparse
import importlib.metadata
import json
import platform
import tempfile
import time
from pathlib import Path

import bioc
import spacy

from spacy_pel.bioc_corpus import pubtator_to_bioc
from spacy_pel.corpora import gold_spans, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora

ROOT = Path(__file__).resolve().parents[1]



def summary(doc):
    spans = [(s.start, s.end, s.label_, s.kb_id_) for s in gold_spans(doc)]
    ents = [(s.start, s.end, s.label_, s.kb_id_) for s in doc.ents]
    return [t.text for t in doc], [t.whitespace_ for t in doc], doc.user_data.get("pmid"), spans, ents


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pubtator", type=Path, default=ROOT.parent / "shared/data/bc5cdr/CDR_DevelopmentSet.PubTator.txt")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "bioc_roundtrip")
    args = ap.parse_args()
    nlp = spacy.blank("en")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        collection = pubtator_to_bioc(read_pubtator(args.pubtator))
        with open(tmp / "dev.xml", "w", encoding="utf8") as fp:
            bioc.biocxml.dump(collection, fp)
        with open(tmp / "dev.json", "w", encoding="utf8") as fp:
            bioc.biocjson.dump(collection, fp)
        write_s = time.perf_counter() - t
        routes = [("PubTator", args.pubtator), ("BioC XML", tmp / "dev.xml"), ("BioC JSON", tmp / "dev.json")]
        reference = None
        for name, path in routes:
            t = time.perf_counter()
            stats = convert_corpora([path], tmp / "out.spacy")
            seconds = time.perf_counter() - t
            docs = [summary(d) for d in read_docbin(nlp, tmp / "out.spacy")]
            if reference is None:
                reference = docs
            spans = [s for d in docs for s in d[3]]
            ref_spans = [s for d in reference for s in d[3]]
            rows.append({
                "route": name, "file_mb": round(path.stat().st_size / 1e6, 2), "docs": len(docs),
                "spans": len(spans), "nil": stats["nil"], "composite": stats["composite"],
                "relations_skipped": stats["relations_skipped"],
                "tokens_equal": [d[:3] for d in docs] == [d[:3] for d in reference],
                "spans_equal": [(a, b, c) for a, b, c, _ in spans] == [(a, b, c) for a, b, c, _ in ref_spans],
                "kb_ids_equal": [s[3] for s in spans] == [s[3] for s in ref_spans],
                "ents_equal": [d[4] for d in docs] == [d[4] for d in reference],
                "all_equal": docs == reference, "convert_s": round(seconds, 2),
            })
    report = {"input": str(args.pubtator), "bioc_write_s": round(write_s, 2), "bioc_version": importlib.metadata.version("bioc"),
              "machine": f"{platform.machine()}, {platform.python_version()}", "routes": rows}
    args.out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf8")
    lines = [
        "# BioC XML / JSON input vs PubTator: BC5CDR dev",
        "",
        f"Written by `python benchmarks/bioc_roundtrip.py` (input `{args.pubtator.name}`). The PubTator file was written as",
        "BioC XML and BioC JSON with the PyPI `bioc` library (title and abstract passages, CID relations as",
        f"typed relations; {write_s:.1f} s for both), then each file went through `convert` "
        "(`spacy_pel.corpus_formats.convert_corpora`).",
        "Equal = document by document, the same tokens and whitespace, PMIDs, gold spans (offsets and labels),",
        "kb ids and `doc.ents` as the PubTator route.",
        "",
        "| route | file MB | docs | spans | NIL | composite | relations left out | tokens equal | spans equal | kb ids equal | ents equal | convert s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        rel = ", ".join(f"{n} {k}" for k, n in sorted(r["relations_skipped"].items()))
        yes = {True: "yes", False: "**no**"}
        lines.append(f"| {r['route']} | {r['file_mb']} | {r['docs']} | {r['spans']} | {r['nil']} | {r['composite']} | {rel} | "
                     f"{yes[r['tokens_equal']]} | {yes[r['spans_equal']]} | {yes[r['kb_ids_equal']]} | {yes[r['ents_equal']]} | {r['convert_s']} |")
    verdict = "equal to the PubTator route" if all(r["all_equal"] for r in rows) else "**different from the PubTator route**"
    lines += ["", f"Both BioC routes give a `.spacy` corpus {verdict}.",
              "Times are wall-clock seconds on a shared 2-core machine (another job was training), one run each.", ""]
    args.out.with_suffix(".md").write_text("\n".join(lines), encoding="utf8")


if __name__ == "__main__":
    main()
