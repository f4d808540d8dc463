"""What an entity input's third part reads: its synonyms (the description of an entity without any) by
default, or SPEC §1's description first (``entity_text``); and a KB update reads an earlier KB's rows as
they were encoded, whichever choice encoded them."""
import json

import numpy as np
import pytest

from spacy_pel.kb import Entity
from spacy_pel.models.encoder import BiEncoder, EncoderConfig
from spacy_pel.models.pieces import ENTITY_TEXTS, entity_text_fields
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.config import ConfigError, EncoderSection, parse_section

BOTH = Entity("D1", "lithium carbonate", ["Li2CO3", "carbolith"], ["Chemical"], "a salt used in bipolar disorder")
DESCRIPTION_ONLY = Entity("D2", "tricuspid regurgitation", [], ["Disease"], "valve leak")
SYNONYMS_ONLY = Entity("D3", "atrial flutter", ["flutter"], ["Disease"])
NAME_ONLY = Entity("D5", "warfarin", [], ["Chemical"])


def test_the_extra_text_is_the_synonyms_else_the_description_by_default():
    assert ENTITY_TEXTS[0] == "synonyms_or_description" == EncoderConfig().entity_text
    assert entity_text_fields(BOTH) == ("lithium carbonate", "Chemical", "Li2CO3 ; carbolith")
    assert entity_text_fields(DESCRIPTION_ONLY) == ("tricuspid regurgitation", "Disease", "valve leak")
    assert entity_text_fields(SYNONYMS_ONLY)[2] == "flutter" and entity_text_fields(NAME_ONLY)[2] == ""
    first = "description_or_synonyms"
    assert entity_text_fields(BOTH, first)[2] == "a salt used in bipolar disorder"
    assert entity_text_fields(SYNONYMS_ONLY, first)[2] == "flutter"
    assert entity_text_fields(DESCRIPTION_ONLY, first)[2] == "valve leak"
    with pytest.raises(ValueError, match="entity_text must be one of"):
        entity_text_fields(BOTH, "description")
    with pytest.raises(ValueError, match="entity_text must be one of"):
        EncoderConfig(entity_text="synonyms")


def test_the_encoder_reads_its_setting_keeps_it_when_saved_and_a_config_refuses_another(tiny_bert, tmp_path):
    default = BiEncoder.from_pretrained(str(tiny_bert))
    first = BiEncoder.from_pretrained(str(tiny_bert), entity_text="description_or_synonyms")
    tok = default.tokenizer
    synonyms = tok("Li2CO3 ; carbolith", add_special_tokens=False)["input_ids"]
    description = tok("a salt used in bipolar disorder", add_special_tokens=False)["input_ids"]
    (a,), (b,) = default.entity_inputs([BOTH]), first.entity_inputs([BOTH])
    assert a[-len(synonyms) - 1 : -1] == synonyms and b[-len(description) - 1 : -1] == description
    first.save(tmp_path / "enc")
    assert json.loads((tmp_path / "enc" / "pel_encoder.json").read_text())["entity_text"] == "description_or_synonyms"
    assert BiEncoder.from_pretrained(str(tmp_path / "enc")).entity_inputs([BOTH]) == [b]
    # the towers are the same: a KB row's text is the build's business (its stamp), not the fingerprint's
    assert first.fingerprint() == default.fingerprint()
    section = parse_section(EncoderSection, {"base": "x", "entity_text": "description_or_synonyms"}, "[encoder]")
    assert section.overrides == {"entity_text": "description_or_synonyms"}
    with pytest.raises(ConfigError, match="entity_text"):
        parse_section(EncoderSection, {"base": "x", "entity_text": "definitions"}, "[encoder]")


def write(path, entities):
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in entities), encoding="utf8")
    return path


def test_an_update_reads_the_earlier_rows_as_they_were_encoded(tiny_bert, tmp_path):
    """An earlier KB encoded description-first, updated by an encoder that reads synonyms first: only the
    entities whose input is the same either way (no description, or no synonyms) keep their vectors."""
    kb = write(tmp_path / "kb.jsonl", [BOTH, DESCRIPTION_ONLY, SYNONYMS_ONLY, NAME_ONLY])
    first, default = tmp_path / "first", tmp_path / "default"
    BiEncoder.from_pretrained(str(tiny_bert), entity_text="description_or_synonyms").save(first)
    BiEncoder.from_pretrained(str(tiny_bert)).save(default)
    build_kb(kb, tmp_path / "old", format="jsonl", encoder=str(first), progress=False)
    report = build_kb(kb, tmp_path / "new", format="jsonl", encoder=str(default), progress=False, reuse=tmp_path / "old")
    assert report["entities_encoded"] == 1 and report["entities_reused"] == 3  # D1's input changed
    full = build_kb(kb, tmp_path / "full", format="jsonl", encoder=str(default), progress=False)
    assert full["entities_encoded"] == 4
    new, ref, old = (EntityIndex.from_disk(tmp_path / p) for p in ("new", "full", "old"))
    row = [e.astype(np.float32)[0] for e in (new.embeddings, ref.embeddings, old.embeddings)]
    assert np.allclose(row[0], row[1], atol=2e-3) and not np.allclose(row[2], row[1], atol=2e-3)
    # a stamp whose texts digest matches neither choice: nothing is reused, and the report says why
    stamp = json.loads((tmp_path / "old" / "stamp.json").read_text())
    (tmp_path / "old" / "stamp.json").write_text(json.dumps({**stamp, "entities_sha256": "0" * 64}))
    report = build_kb(kb, tmp_path / "again", format="jsonl", encoder=str(default), progress=False, reuse=tmp_path / "old")
    assert report["entities_encoded"] == 4
    assert "does not record the texts" in report["resume"]["reuse"]["not_reused_because"]
