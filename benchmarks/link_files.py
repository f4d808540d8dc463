"""``python -m spacy_pel link`` on real data: BC5CDR dev (PubTator, the gold mentions given) linked by a
saved pipeline into PubTator, BioC XML and JSON lines, each by the command in a fresh process.

For each output: the command's wall time (load included) and its own linking rate; R@1 of the ids
written against the gold ids of the in-KB mentions (an in-KB mention the NIL decision calls NIL is a
miss here, while ``evaluate``'s R@1 ranks the candidates before that decision: the two differ by the
in-KB mentions called NIL);
whether the output reads back (``read_pubtator`` / ``read_bioc``) with the input's documents, text and
mention offsets; and whether the three outputs carry the same ids.

    python benchmarks/link_files.py --pipeline training/pipeline_calibrated
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import spacy
import typer

from _common import ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.bioc_corpus import read_bioc
from spacy_pel.corpora import NIL, read_pubtator
from spacy_pel.pipeline.linker import find_linker

app = typer.Typer(add_completion=False)
DEV = ROOT.parent / "shared" / "data" / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"
OUTPUTS = ("dev.pubtator", "dev.xml", "dev.jsonl")


def linked_ids(path: Path) -> list:
    """The id written for each mention, in document order."""
    if path.suffix == ".jsonl":
        return [m["kb_id"] for line in path.read_text(encoding="utf8").splitlines() for m in json.loads(line)["mentions"]]
    docs = read_pubtator(path) if path.suffix == ".pubtator" else read_bioc(path, "bioc-xml")
    return [a.ids[0] for d in docs for a in d.annotations]


def same_documents(path: Path, gold: list) -> bool:
    """Whether a PubTator / BioC output has the input's documents, texts and mention offsets and types."""
    docs = read_pubtator(path) if path.suffix == ".pubtator" else read_bioc(path, "bioc-xml")
    key = lambda ds: [(d.pmid, d.text, [(a.start, a.end, a.type) for a in d.annotations]) for d in ds]  # noqa: E731
    return key(docs) == key(gold)


@app.command()
def main(pipeline: Path = typer.Option(..., help="A saved pipeline with pel_linker (gold mentions: no NER needed)"),
         dev: Path = typer.Option(DEV, help="PubTator corpus with gold ids"),
         work: Path = typer.Option(Path("/tmp/pel_link_files")),
         output: Path = typer.Option(ROOT / "benchmarks" / "link_files", help="Report path without suffix")):
    work.mkdir(parents=True, exist_ok=True)
    gold = read_pubtator(dev)
    kb_ids = {str(i) for i in find_linker(spacy.load(pipeline))[1].index.entities.ids}
    gold_ids = [a.ids for d in gold for a in d.annotations]
    runs = []
    for name in OUTPUTS:
        out = work / name
        t0 = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "spacy_pel", "link", str(dev), str(out), "--pipeline", str(pipeline),
                               "--no-progress"], check=True, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        stats = json.loads(done.stdout)
        ids = linked_ids(out)
        scored = [(p, g) for p, g in zip(ids, gold_ids) if any(i in kb_ids for i in g)]
        runs.append({"output": name, "format": stats["output_format"], "docs": stats["docs"], "mentions": stats["mentions"],
                     "nil": stats["nil"], "wall_seconds": round(wall, 1), "link_seconds": stats["seconds"],
                     "mentions_per_s": stats["mentions_per_s"], "in_kb": len(scored),
                     "R@1": round(sum(p in g for p, g in scored) / len(scored), 4),
                     "reads_back_same_documents": same_documents(out, gold) if name != "dev.jsonl" else None,
                     "ids": ["NIL" if i in ("NIL", NIL) else i for i in ids]})
    same = all(r["ids"] == runs[0]["ids"] for r in runs)
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "pipeline": str(pipeline), "dev": str(dev),
              "invocation": invocation(), "same_ids_in_every_output": same,
              "runs": [{k: v for k, v in r.items() if k != "ids"} for r in runs]}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    lines = ["# `python -m spacy_pel link`: BC5CDR dev linked into PubTator, BioC XML and JSON lines", "",
             machine_line(report["machine"]) + ".", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
             f"Pipeline `{pipeline}`; input `{dev}`. Reproduce: `{report['invocation']}`.", "",
             "| output | docs | mentions | NIL | wall s (load included) | linking s | mentions/s | in-KB mentions | R@1 | reads back: same docs, texts, offsets |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in report["runs"]:
        back = {True: "yes", False: "**no**", None: "–"}[r["reads_back_same_documents"]]
        lines.append(f"| `{r['output']}` ({r['format']}) | {r['docs']} | {r['mentions']} | {r['nil']} | {r['wall_seconds']} | "
                     f"{r['link_seconds']} | {r['mentions_per_s']:,.0f} | {r['in_kb']} | {r['R@1']:.4f} | {back} |")
    lines += ["", f"The three outputs carry the same id for every mention: **{'yes' if same else 'no'}**.", ""]
    output.with_suffix(".md").write_text("\n".join(lines), encoding="utf8")
    typer.echo("\n".join(lines))


if __name__ == "__main__":
    app()
