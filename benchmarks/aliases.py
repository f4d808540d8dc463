"""Alias table + retriever (issue 3's bar, combined): BC5CDR dev gold mentions vs all MeSH records.

    python benchmarks/aliases.py --encoder training/bench/ce_mixed50_3ep/best --name ce_mixed50_3ep

Rows: the alias table alone (the issue's bar: BC5CDR train surface forms, then exact MeSH names and
synonyms; a mention no name matches gets no answer; ties between KB names go to the first KB row),
the retriever alone, and the retriever with the alias table rule (KB names only, then KB names + train
surface forms) and the abbreviation rule. The mention vectors are computed once (cached in training/bench/<name>_dev_vecs.npy)
and every row re-ranks the same top-64. Writes benchmarks/aliases/<name>.json and benchmarks/aliases.md.
"""
import json
import time
from pathlib import Path

import numpy as np
import spacy
import typer

from spacy_pel.corpora import corpus_ids, gold_ids, gold_spans, read_docbin
from spacy_pel.evaluation.linking import metrics
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.abbreviations import short_form_links
from spacy_pel.pipeline.aliases import AliasTable, mention_counts, normalize
from spacy_pel.retrieval.index import EntityIndex

HERE = Path(__file__).resolve().parent
K = 64


def main(encoder: Path = typer.Option(..., help="trained encoder folder (frozen entity tower: the KB's)"),
         name: str = typer.Option(..., help="row label and cache name"),
         kb: Path = typer.Option(Path("kbs/mesh")), dev: Path = typer.Option(Path("corpus/bc5cdr_dev.spacy")),
         train: Path = typer.Option(Path("corpus/bc5cdr_train.spacy")), context: int = typer.Option(64),
         precision: str = typer.Option("fp32", help="mention encoding precision (fp32: the committed rows)")):
    nlp = spacy.blank("en")
    docs, train_docs = read_docbin(nlp, dev), read_docbin(nlp, train)
    train_ids = corpus_ids(train_docs)
    index = EntityIndex.from_disk(kb)
    cache = Path("training/bench") / f"{name}_dev_vecs.npy"
    linker = nlp.add_pipe("pel_linker", config={"context_window": context, "device": "cpu", "precision": precision})
    linker.set_resources(BiEncoder.from_pretrained(encoder), index)
    spans = [[(s.start, s.end, s.label) for s in gold_spans(d)] for d in docs]
    t0 = time.perf_counter()
    if cache.exists():
        vectors = np.load(cache)
    else:
        vectors = linker.mention_vectors(docs, spans)
        np.save(cache, vectors)
    encode_s = time.perf_counter() - t0
    scores, rows = index.search(vectors, K)
    texts = [d[a:b].text for d, sp in zip(docs, spans) for a, b, _ in sp]
    gold = [gold_ids(s.kb_id_) for d in docs for s in gold_spans(d)]
    ents = index.entities

    def report(sc, rw, seconds):
        table = [(g, [ents[j].id if j >= 0 else None for j in r], s) for g, r, s in zip(gold, rw, sc)]
        m = metrics(table, seconds, index.row, train_ids)
        return {k: m[k] for k in ("counts", "recall_in_kb", "recall_seen", "recall_unseen")}

    counts = mention_counts(train_docs)
    out = {"retriever": report(scores, rows, encode_s)}
    # the alias table alone: train surface forms, then KB names; no answer otherwise
    alone = AliasTable(index, counts)
    pred = []
    for t in texts:
        allowed = alone.candidates(t)
        pred.append([min(allowed)] if allowed else [-1])
    out["alias table alone"] = report(np.zeros((len(texts), 1)), np.array(pred), 0.0)
    out["matched"] = {"kb_names": int(sum(normalize(t) in alone.names for t in texts)),
                      "train_or_kb": int(sum(alone.candidates(t) is not None for t in texts)), "mentions": len(texts)}
    for label, table in (("retriever + KB names", AliasTable(index)), ("retriever + KB names + train aliases", alone)):
        sc, rw = table.restrict(texts, vectors, scores, rows)
        out[label] = report(sc, rw, encode_s)
    # the abbreviation rule: a defined short form takes its long-form mention's candidates
    lookup, copy_from = short_form_links(docs, spans, texts)
    out["matched"]["abbreviations"] = len(copy_from) + sum(a != b for a, b in zip(lookup, texts))
    for label, table in (("retriever + abbreviations", None), ("retriever + KB names + train aliases + abbreviations", alone)):
        sc, rw = (scores.copy(), rows.copy()) if table is None else table.restrict(lookup, vectors, scores, rows)
        for i, j in copy_from.items():
            sc[i], rw[i] = sc[j], rw[j]
        out[label] = report(sc, rw, encode_s)
    target = HERE / "aliases"
    target.mkdir(exist_ok=True)
    (target / f"{name}.json").write_text(json.dumps({"encoder": str(encoder), **out}, indent=2))
    write_table(target)


def write_table(target: Path) -> None:
    lines = ["# Alias table and retriever, BC5CDR dev gold mentions vs all 354,068 MeSH records", "",
             "Reproduce: `python benchmarks/aliases.py --encoder DIR --name NAME` (see the script's doc). "
             "The rules are pel_linker's `spacy_pel.rules.abbreviations.v1` and `spacy_pel.rules.alias_table.v1` (configs/linker_rules.cfg); train aliases come from `python -m spacy_pel.aliases corpus/bc5cdr_train.spacy -o aliases.json`.", "",
             "| encoder | linking | R@1 | R@64 | seen R@1 | unseen R@1 |", "|---|---|---:|---:|---:|---:|"]
    for f in sorted(target.glob("*.json")):
        r = json.loads(f.read_text())
        for label in ("alias table alone", "retriever", "retriever + KB names", "retriever + KB names + train aliases",
                      "retriever + abbreviations", "retriever + KB names + train aliases + abbreviations"):
            if label not in r:
                continue
            m = r[label]
            lines.append(f"| {f.stem} | {label} | {m['recall_in_kb']['R@1']:.3f} | "
                         f"{m['recall_in_kb']['R@64'] if label != 'alias table alone' else float('nan'):.3f} | "
                         f"{m['recall_seen']['R@1']:.3f} | {m['recall_unseen']['R@1']:.3f} |")
        mt = r["matched"]
        lines.append(f"| {f.stem} | mentions matched: KB names {mt['kb_names']:,}, train or KB {mt['train_or_kb']:,}, "
                     f"defined short forms {mt.get('abbreviations', 0):,}, of {mt['mentions']:,} | | | | |")
    lines += ["", "R@k over the dev mentions whose gold id is in the KB; unseen = gold entity never in BC5CDR train. "
              "The alias table alone has no ranking beyond its one answer (R@64 not applicable).",
              "Checked through the component as the project assembles it (`spacy project run aliases`, then "
              "`python -m spacy assemble configs/linker_rules.cfg training/pipeline_alias --paths.kb kbs/mesh --paths.encoder "
              "training/bench/ce_cosine_mixed50_3ep/best --paths.aliases training/aliases.json "
              "--components.pel_linker.context_window 64` and `python -m spacy_pel.evaluate corpus/bc5cdr_dev.spacy "
              "--pipeline training/pipeline_alias --train corpus/bc5cdr_train.spacy`): R@1 0.908, unseen 0.799, "
              "R@64 0.964, 82 mentions/s on 2 cores while a test run shared them (2026-11-22).",
              "Bars from issue 3: alias table 0.790 overall / 0.600 unseen; target ≥ 0.90 / ≥ 0.75.", ""]
    (target.parent / "aliases.md").write_text("\n".join(lines))


if __name__ == "__main__":
    typer.run(main)
