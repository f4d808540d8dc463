"""A corpus annotated against an older release of the KB — alternative ids (OBO ``alt_id``, an obsolete
term's ``replaced_by``, MEDIC's AltDiseaseIDs) — is linked and measured by every command as ``evaluate``
does: the ids resolve to their entity."""
import json

import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.retrieval.build import build_kb

OBO = """format-version: 1.2
default-namespace: human_phenotype

[Term]
id: HP:0000002
name: abnormality of body height
alt_id: HP:0000003

[Term]
id: HP:0000010
name: obsolete recurrent infection
is_obsolete: true
replaced_by: HP:0000020

[Term]
id: HP:0000020
name: recurrent infections

[Term]
id: HP:0000030
name: seizure
"""
TEXT = "Short stature and recurrent infection and a rash."
PUBTATOR = (f"1|t|{TEXT}\n1|a|\n1\t0\t13\tShort stature\tPhenotype\tHP:0000003\n"
            "1\t18\t37\trecurrent infection\tPhenotype\tHP:0000010\n1\t44\t48\trash\tPhenotype\t-1\n\n")


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_calibrate_takes_a_corpus_of_alternative_ids(tmp_path, tiny_encoder_dir):
    """Before, calibrate counted only primary ids as linkable and refused this corpus ("none of its gold
    mentions has an id in the KB") while evaluate measured it."""
    (tmp_path / "hp.obo").write_text(OBO, encoding="utf8")
    build_kb(tmp_path / "hp.obo", tmp_path / "kb", format="obo", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb"), "top_k": 3, "precision": "fp32"})
    find_linker(nlp)[1].ensure_loaded()
    nlp.to_disk(tmp_path / "pipe")
    (tmp_path / "c.pubtator").write_text(PUBTATOR, encoding="utf8")
    assert run("convert", tmp_path / "c.pubtator", tmp_path / "c.spacy").exit_code == 0
    result = run("evaluate", tmp_path / "c.spacy", "--pipeline", tmp_path / "pipe", "--output", tmp_path / "m.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "m.json").read_text())["counts"]["in_kb"] == 2
    result = run("calibrate", tmp_path / "pipe", tmp_path / "c.spacy", "-o", tmp_path / "cal")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "cal" / "config.cfg").is_file()
