"""Encoders, KBs and pipelines saved by earlier versions: an encoder saved before ``entity_text`` existed keeps
reading descriptions first (and ``build-kb --add`` refuses a KB whose rows read another choice); an encoder
saved with the removed ``entity_parents`` links with the KB it built and refuses, in one line, to encode
entities; a saved setting this version does not know is refused, never dropped."""
import hashlib
import json

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.files import InputError
from spacy_pel.kb import Entity
from spacy_pel.models.cross_encoder import CrossEncoder
from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.self_alignment import kept_settings

KB = [
    Entity("D1", "lithium carbonate", ["Li2CO3"], ["Chemical"]),
    Entity("D2", "tricuspid regurgitation", [], ["Disease"], "valve leak"),
    Entity("D6", "heart failure", ["cardiac failure"], ["Disease"], "the heart cannot pump enough"),
    Entity("D7", "ibuprofen", ["advil"], ["Chemical"], "an NSAID"),
]
ADD = [Entity("D8", "naproxen", ["aleve"], ["Chemical"], "another NSAID painkiller")]


def write(path, entities):
    path.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in entities), encoding="utf8")
    return path


def edit_json(path, **changes):
    """``path``'s JSON object with ``changes`` (a value None: the key removed), written back."""
    data = json.loads(path.read_text(encoding="utf8"))
    data.update(changes)
    path.write_text(json.dumps({k: v for k, v in data.items() if v is not None}, indent=2), encoding="utf8")


def one_line(err) -> str:
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.fixture
def old_encoder(tiny_bert, tmp_path):
    """An encoder folder as spacy_pel saved it before b92df64: no ``entity_text`` key."""
    folder = tmp_path / "old_encoder"
    BiEncoder.from_pretrained(str(tiny_bert)).save(folder)
    edit_json(folder / "pel_encoder.json", entity_text=None)
    return folder


@pytest.fixture
def old_kb(old_encoder, tmp_path):
    """A KB that encoder built before b92df64: every row reads its description first."""
    kb = write(tmp_path / "kb.jsonl", KB)
    edit_json(old_encoder / "pel_encoder.json", entity_text="description_or_synonyms")
    build_kb(kb, tmp_path / "kb", format="jsonl", encoder=str(old_encoder), progress=False)
    edit_json(old_encoder / "pel_encoder.json", entity_text=None)
    return tmp_path / "kb"


# ---------------------------------------------------------------------------- entity_text (bug01)


def test_an_encoder_saved_before_entity_text_reads_descriptions_first(old_encoder, tmp_path):
    encoder = BiEncoder.from_pretrained(str(old_encoder))
    assert encoder.config.entity_text == "description_or_synonyms"
    assert encoder.entity_text_fields(KB[2])[2] == "the heart cannot pump enough"
    # an override still wins, and a re-saved encoder keeps what it read
    assert BiEncoder.from_pretrained(str(old_encoder), entity_text="synonyms_or_description").config.entity_text == \
        "synonyms_or_description"
    encoder.save(tmp_path / "resaved")
    assert json.loads((tmp_path / "resaved" / "pel_encoder.json").read_text())["entity_text"] == "description_or_synonyms"


def test_add_to_an_old_kb_with_its_old_encoder_reads_descriptions_first(old_encoder, old_kb, tmp_path):
    build_kb(None, old_kb, format="jsonl", add=write(tmp_path / "add.jsonl", ADD), progress=False)
    index = EntityIndex.from_disk(old_kb)
    row = index.embeddings[index.row["D8"]].astype(np.float32)
    first = BiEncoder.from_pretrained(str(old_encoder), entity_text="description_or_synonyms")
    assert np.allclose(row, first.encode_entities(ADD)[0], atol=2e-2)
    # the grown KB is one scheme: a next --add (and a --reuse) reads it under that choice
    report = build_kb(write(tmp_path / "all.jsonl", KB + ADD), tmp_path / "again", format="jsonl",
                      encoder=str(old_encoder), progress=False, reuse=old_kb)
    assert report["entities_encoded"] == 0 and report["entities_reused"] == 5


def test_reuse_of_an_old_kb_from_the_same_input_and_encoder_copies_it(old_encoder, old_kb, tmp_path):
    report = build_kb(tmp_path / "kb.jsonl", tmp_path / "same", format="jsonl", encoder=str(old_encoder),
                      progress=False, reuse=old_kb)
    assert report["entities_encoded"] == 0 and report["reused_from"] == str(old_kb)


def test_add_refuses_a_kb_whose_rows_read_another_entity_text(old_encoder, old_kb, tmp_path):
    """The same towers (entity_text is not in the fingerprint) reading synonyms first would make the grown
    KB two input schemes: refused in one line naming both choices, before anything is encoded or written."""
    edit_json(old_encoder / "pel_encoder.json", entity_text="synonyms_or_description")
    before = (old_kb / "embeddings.npy").read_bytes()
    with pytest.raises(InputError) as err:
        build_kb(None, old_kb, format="jsonl", add=write(tmp_path / "add.jsonl", ADD), progress=False)
    message = one_line(err)
    assert "description_or_synonyms" in message and "synonyms_or_description" in message and "--reuse" in message
    assert (old_kb / "embeddings.npy").read_bytes() == before
    # a KB whose rows read the same either way (no entity with both synonyms and a description) takes either
    write(tmp_path / "plain.jsonl", KB[:2])
    build_kb(tmp_path / "plain.jsonl", tmp_path / "plain", format="jsonl", encoder=str(old_encoder), progress=False)
    edit_json(old_encoder / "pel_encoder.json", entity_text="description_or_synonyms")
    report = build_kb(None, tmp_path / "plain", format="jsonl", add=tmp_path / "add.jsonl", progress=False)
    assert report["entities_encoded"] == 1


# ---------------------------------------------------------------------------- entity_parents (bug02)


def old_fingerprint(encoder, parents):
    """0e845e7's BiEncoder.fingerprint: entity_parents among the settings when not 0."""
    h = hashlib.sha256()
    h.update(json.dumps({**encoder.entity_settings(), "entity_parents": parents}, sort_keys=True).encode())
    h.update(json.dumps(sorted(encoder.tokenizer.get_vocab().items())).encode())
    for name, tensor in sorted(encoder.entity_model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:32]


def as_parents_era(encoder_folder, kb_folder, fingerprint):
    """The folders as 0e845e7 wrote them with entity_parents=2 (no entity_text key; the KB records the setting)."""
    edit_json(encoder_folder / "pel_encoder.json", entity_parents=2, fingerprint=fingerprint, entity_text=None)
    meta = json.loads((kb_folder / "meta.json").read_text())
    edit_json(kb_folder / "meta.json", encoder_fingerprint=fingerprint,
              encoder_entity_settings={**meta["encoder_entity_settings"], "entity_parents": 2})


@pytest.fixture
def parents_pipeline(tiny_bert, tmp_path):
    encoder = BiEncoder.from_pretrained(str(tiny_bert))
    fingerprint = old_fingerprint(encoder, 2)
    encoder.save(tmp_path / "encoder")
    build_kb(write(tmp_path / "kb.jsonl", KB), tmp_path / "kb", format="jsonl", encoder=str(tmp_path / "encoder"),
             progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "kb")})
    nlp.to_disk(tmp_path / "pipeline")
    for enc, kb in ((tmp_path / "encoder", tmp_path / "kb"),
                    (tmp_path / "pipeline/pel_linker/encoder", tmp_path / "pipeline/pel_linker/kb")):
        as_parents_era(enc, kb, fingerprint)
    return tmp_path, fingerprint


def link(nlp):
    doc = nlp.make_doc("heart failure and ibuprofen")
    doc.ents = [Span(doc, 0, 2, "Disease"), Span(doc, 3, 4, "Chemical")]
    return [(e.kb_id_, round(e._.pel_confidence, 4)) for e in nlp(doc).ents]


@pytest.mark.filterwarnings("ignore:pel_linker")
def test_a_pipeline_saved_with_entity_parents_links_as_saved(parents_pipeline, tmp_path):
    """The KB's rows were encoded then, and the mention tower never read the setting: the pipeline links with
    its own KB as it did (the removed setting's fingerprint rule is kept), and saved again it loads again."""
    folder, fingerprint = parents_pipeline
    encoder = BiEncoder.from_pretrained(str(folder / "encoder"))
    assert encoder.fingerprint() == fingerprint
    nlp = spacy.load(folder / "pipeline")
    linked = link(nlp)
    assert [i for i, _ in linked] and all(i for i, _ in linked)
    nlp.to_disk(tmp_path / "resaved")
    saved = json.loads((tmp_path / "resaved/pel_linker/encoder/pel_encoder.json").read_text())
    assert saved["entity_parents"] == 2 and saved["fingerprint"] == fingerprint
    assert link(spacy.load(tmp_path / "resaved")) == linked


def test_an_entity_parents_encoder_refuses_in_one_line_to_encode_entities(parents_pipeline, tmp_path):
    folder, fingerprint = parents_pipeline
    with pytest.raises(InputError) as err:
        build_kb(None, folder / "kb", format="jsonl", add=write(tmp_path / "add.jsonl", ADD), progress=False)
    message = one_line(err)
    assert "entity_parents=2" in message and "removed" in message and "entity_parents=0" in message
    with pytest.raises(InputError, match="entity_parents"):
        build_kb(folder / "kb.jsonl", tmp_path / "kb2", format="jsonl", encoder=str(folder / "encoder"), progress=False)
    assert not (tmp_path / "kb2").exists() and not (tmp_path / "kb2.partial").exists()  # refused before any work
    # the way out: the setting dropped (entity_parents=0) gives the encoder of today, whose KB is rebuilt
    dropped = BiEncoder.from_pretrained(str(folder / "encoder"), entity_parents=0)
    assert dropped.fingerprint() != fingerprint and "entity_parents" not in dropped.entity_settings()
    dropped.save(tmp_path / "dropped")
    assert "entity_parents" not in json.loads((tmp_path / "dropped/pel_encoder.json").read_text())
    build_kb(folder / "kb.jsonl", tmp_path / "kb3", format="jsonl", encoder=str(tmp_path / "dropped"), progress=False)
    with pytest.raises(ValueError, match="entity_parents"):
        BiEncoder.from_pretrained(str(folder / "encoder"), entity_parents=3)


def test_a_kb_recording_entity_parents_names_it_when_refused(parents_pipeline, tiny_encoder_dir):
    folder, _ = parents_pipeline
    with pytest.raises(EncoderMismatchError) as err:
        EntityIndex.from_disk(folder / "kb").check_encoder(BiEncoder.from_pretrained(str(tiny_encoder_dir)))
    message = one_line(err)
    assert "entity_parents" in message and "removed" in message and "weights or vocabulary differ" not in message


def test_a_saved_setting_this_version_does_not_know_is_refused_not_dropped(tiny_encoder_dir, tmp_path):
    folder = tmp_path / "encoder"
    BiEncoder.from_pretrained(str(tiny_encoder_dir)).save(folder)
    plain = BiEncoder.from_pretrained(str(folder)).fingerprint()
    edit_json(folder / "pel_encoder.json", entity_parents=0)  # the removed setting's no-op value: as before
    assert BiEncoder.from_pretrained(str(folder)).fingerprint() == plain
    edit_json(folder / "pel_encoder.json", entity_synonyms_max=3)
    with pytest.raises(InputError) as err:
        BiEncoder.from_pretrained(str(folder))
    assert "entity_synonyms_max" in one_line(err) and "pel_encoder.json" in one_line(err)


def test_a_reranker_and_an_adapt_start_saved_before_entity_text_read_descriptions_first(old_encoder, tiny_bert, tmp_path):
    """The cross-encoder (a re-ranker saved before b92df64) and adapt's kept settings of a start encoder read a
    missing entity_text as the encoder did then, not as today's default (session 73's upgrade probe, left alone)."""
    assert kept_settings(str(old_encoder))["encoder.entity_text"] == "description_or_synonyms"
    folder = tmp_path / "old_reranker"
    CrossEncoder.from_pretrained(str(tiny_bert)).save(folder)
    edit_json(folder / "pel_cross_encoder.json", entity_text=None)
    assert CrossEncoder.from_pretrained(folder).config.entity_text == "description_or_synonyms"
    assert CrossEncoder.from_pretrained(folder, entity_text="synonyms_or_description").config.entity_text == "synonyms_or_description"


def test_a_reranker_refuses_a_setting_it_does_not_know(tiny_bert, tmp_path):
    """Another version's key in pel_cross_encoder.json, or a mistyped override, was dropped silently (/tmp/hJJ bug01)."""
    folder = tmp_path / "reranker"
    CrossEncoder.from_pretrained(str(tiny_bert)).save(folder)
    with pytest.raises(ValueError, match="entity_txt"):
        CrossEncoder.from_pretrained(folder, entity_txt="description_or_synonyms")
    edit_json(folder / "pel_cross_encoder.json", context_window=64)
    with pytest.raises(InputError, match="context_window") as err:
        CrossEncoder.from_pretrained(folder)
    assert "pel_cross_encoder.json" in one_line(err)
