"""Several KBs in one pipeline, on real data: BC5CDR dev's chemicals linked against MeSH and its diseases against
MEDIC by two ``pel_linker`` components of one pipeline (``spacy_pel.mentions.ents.v1`` with ``labels``), each
taken from a saved pipeline (the default ``all``'s, and the ``transfer`` workflow's, which links MEDIC).

Reported per label: R@1 of the two-linker pipeline (``evaluate --linker``) beside the same linker alone in its own
pipeline (all labels, then only its own); and the ids ``link`` writes for the whole dev file, with the source of
each id (a MeSH descriptor/supplementary record or a MEDIC-only OMIM id).

    python benchmarks/two_kbs.py --chemicals training/pipeline_calibrated --diseases training/ncbi_medic/pipeline_transfer
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import spacy
import typer

from _common import ROOT, invocation, lscpu_model, machine, machine_line
from spacy_pel.corpora import GOLD_KEY, gold_ids, gold_spans, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.evaluation.linking import mention_table, metrics
from spacy_pel.pipeline.linker import find_linker

app = typer.Typer(add_completion=False)
DEV = ROOT.parent / "shared" / "data" / "bc5cdr" / "CDR_DevelopmentSet.PubTator.txt"
ENTS = "spacy_pel.mentions.ents.v1"


def with_labels(pipeline: Path, labels) -> spacy.Language:
    """The saved pipeline with its pel_linker linking ``labels`` only (None: every label)."""
    mentions = {"@misc": ENTS} if labels is None else {"@misc": ENTS, "labels": labels}
    return spacy.load(pipeline, config={"components": {"pel_linker": {"mentions": mentions}}})


def r1(nlp: spacy.Language, name: str, docs, label: str) -> dict:
    """R@1 (in-KB) and mentions of linker ``name`` on the gold mentions of ``label`` in ``docs``."""
    linker = find_linker(nlp, name)[1]
    rows, seconds = mention_table(linker, docs)
    report = metrics(rows, seconds, linker.index.row, None, linker.threshold)
    return {"mentions": report["mentions"], "in_kb": report["counts"]["in_kb"], "R@1": report["recall_in_kb"]["R@1"]}


@app.command()
def main(chemicals: Path = typer.Option(..., help="A saved pipeline whose pel_linker links MeSH"),
         diseases: Path = typer.Option(..., help="A saved pipeline whose pel_linker links MEDIC"),
         dev: Path = typer.Option(DEV, help="BC5CDR dev, PubTator"),
         work: Path = typer.Option(Path("/tmp/pel_two_kbs")),
         output: Path = typer.Option(ROOT / "benchmarks" / "two_kbs", help="Report path without suffix")):
    work.mkdir(parents=True, exist_ok=True)
    convert_corpora([dev], work / "dev.spacy")
    combined = with_labels(chemicals, ["Chemical"])
    combined.rename_pipe("pel_linker", "chemicals")
    combined.add_pipe("pel_linker", name="diseases", source=with_labels(diseases, ["Disease"]))
    combined.to_disk(work / "two_kbs")
    combined = spacy.load(work / "two_kbs")  # what a user loads
    docs = read_docbin(combined, work / "dev.spacy")
    only = {label: [d.copy() for d in docs] for label in ("Chemical", "Disease")}
    for label, label_docs in only.items():  # the same docs with the gold mentions of one label
        for d in label_docs:
            d.spans[GOLD_KEY] = [s for s in gold_spans(d) if s.label_ == label]
    rows = []
    for label, name, source in (("Chemical", "chemicals", chemicals), ("Disease", "diseases", diseases)):
        alone = with_labels(source, None)
        rows.append({"label": label, "linker": name, "source": str(source),
                     "in the two-KB pipeline": r1(combined, name, docs, label),
                     "alone, this label's mentions": r1(alone, "pel_linker", only[label], label)})
    mesh_diseases = r1(with_labels(chemicals, None), "pel_linker", only["Disease"], "Disease")  # one KB for both
    done = subprocess.run([sys.executable, "-m", "spacy_pel", "link", str(dev), str(work / "dev_linked.pubtator"),
                           "--pipeline", str(work / "two_kbs"), "--no-progress"], check=True, capture_output=True, text=True)
    stats = json.loads(done.stdout)
    linked = [a for d in read_pubtator(work / "dev_linked.pubtator") for a in d.annotations]
    gold = [a for d in read_pubtator(dev) for a in d.annotations]
    kinds = {}
    for g, p in zip(gold, linked):
        key = f"{g.type} → {'NIL' if p.ids == ['NIL'] else 'OMIM' if p.ids[0].startswith('OMIM:') else p.ids[0][0] + '…'}"
        kinds[key] = kinds.get(key, 0) + 1
    hits = {t: [p.ids[0] in g.ids for g, p in zip(gold, linked) if g.type == t and gold_ids("|".join(g.ids)) != ["NIL"]]
            for t in ("Chemical", "Disease")}
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "invocation": invocation(), "linkers": rows,
              "diseases_by_the_mesh_pipeline": mesh_diseases,
              "link": {k: stats[k] for k in ("docs", "mentions", "nil", "seconds", "mentions_per_s")},
              "ids_written_by_kind": dict(sorted(kinds.items())),
              "link_R@1_with_NIL_as_miss": {t: round(sum(h) / len(h), 4) for t, h in hits.items()}}
    output.with_suffix(".json").write_text(json.dumps(report, indent=2), encoding="utf8")
    lines = ["# Several KBs in one pipeline: BC5CDR dev, chemicals → MeSH, diseases → MEDIC", "",
             machine_line(report["machine"]) + ".", "", __doc__.split("\n\n")[0].replace("\n", " "), "",
             f"Reproduce: `{report['invocation']}`.", "",
             "| label | linker (source pipeline) | two-KB pipeline: mentions / in KB / R@1 | alone, its label's mentions: mentions / in KB / R@1 |",
             "|---|---|---|---|"]
    for r in rows:
        a, b = r["in the two-KB pipeline"], r["alone, this label's mentions"]
        lines.append(f"| {r['label']} | `{r['linker']}` (`{r['source']}`) | {a['mentions']} / {a['in_kb']} / **{a['R@1']:.4f}** | "
                     f"{b['mentions']} / {b['in_kb']} / {b['R@1']:.4f} |")
    lines += ["", f"For comparison, the MeSH pipeline alone on the diseases (one KB for both labels): {mesh_diseases['mentions']} / "
              f"{mesh_diseases['in_kb']} / {mesh_diseases['R@1']:.4f}.", "",
              f"`link` over the whole dev file with the two-KB pipeline: {stats['docs']} docs, {stats['mentions']} mentions, "
              f"{stats['nil']} NIL, {stats['mentions_per_s']:,.0f} mentions/s; R@1 of the ids written over the gold mentions with "
              "an id (written NIL, or a gold id the KB lacks: a miss): "
              + ", ".join(f"{t} {v:.4f}" for t, v in report["link_R@1_with_NIL_as_miss"].items()) + ".", "",
              "Ids written, by gold label and kind (`D…`/`C…` MeSH-style ids, `OMIM` MEDIC's OMIM-only entries):", "",
              "| gold label → id written | mentions |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in report["ids_written_by_kind"].items()] + [""]
    output.with_suffix(".md").write_text("\n".join(lines), encoding="utf8")
    typer.echo("\n".join(lines))


if __name__ == "__main__":
    app()
