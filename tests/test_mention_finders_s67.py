"""What finds a saved pipeline's mentions in raw text (spacy_pel.pipeline.mention_finders): a span_ruler
sets doc.ents when its config says ``annotate_ents = true`` (its factory declares doc.spans only), so
``link`` and ``evaluate``/``calibrate --e2e`` accept it; a custom component that declares nothing it sets
is accepted with a warning; spaCy's own components are read from their declarations."""
import json
import logging

import pytest
import spacy
from spacy.language import Language

from spacy_pel.bulk.local import link_file
from spacy_pel.files import InputError
from spacy_pel.pipeline.mention_finders import (
    check_finds_mentions,
    check_mention_source,
    mention_finders,
    scan_mention_finders,
)

PATTERNS = [{"label": "Chemical", "pattern": "warfarin"}, {"label": "Chemical", "pattern": "aspirin"}]


@Language.component("s67_custom_ner")
def custom_ner(doc):
    """A custom NER that declares nothing it sets."""
    doc.ents = [doc.char_span(0, 8, label="Chemical")] if doc.text.startswith("warfarin") else []
    return doc


@Language.component("s67_custom_cats", assigns=["doc.cats"])
def custom_cats(doc):
    return doc


def pipeline(kb_dir, before, mentions=None):
    """A blank pipeline with the components ``before`` (factory, config) ahead of pel_linker."""
    nlp = spacy.blank("en")
    for factory, config in before:
        pipe = nlp.add_pipe(factory, config=config)
        if factory == "span_ruler":
            pipe.add_patterns(PATTERNS)
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), **({"mentions": mentions} if mentions else {})})
    return nlp


def test_span_ruler_finds_what_its_settings_say(kb_dir):
    ents = pipeline(kb_dir, [("span_ruler", {"annotate_ents": True, "spans_key": None})])
    assert mention_finders(ents.config) == (False, ["span_ruler"])
    assert [(e.text, bool(e.kb_id_)) for e in ents("warfarin and aspirin").ents] == [("warfarin", True), ("aspirin", True)]
    assert mention_finders(pipeline(kb_dir, [("span_ruler", {})]).config) == (False, [])  # doc.spans["ruler"] only
    group = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "ruler"}
    assert mention_finders(pipeline(kb_dir, [("span_ruler", {})], group).config) == (False, ["span_ruler"])
    assert mention_finders(pipeline(kb_dir, [("span_ruler", {"spans_key": None, "annotate_ents": True})], group).config) \
        == (False, [])
    assert mention_finders(pipeline(kb_dir, [("entity_ruler", {})]).config) == (False, ["entity_ruler"])


def test_link_and_e2e_accept_a_span_ruler_that_annotates_the_entities(kb_dir, tmp_path):
    pipeline(kb_dir, [("span_ruler", {"annotate_ents": True, "spans_key": None})]).to_disk(tmp_path / "ruler")
    pipeline(kb_dir, [("span_ruler", {})]).to_disk(tmp_path / "groups")
    check_finds_mentions(tmp_path / "ruler", "--e2e")
    with pytest.raises(InputError, match="--e2e runs pipeline .* cannot find mentions there"):
        check_finds_mentions(tmp_path / "groups", "--e2e")
    (tmp_path / "in.jsonl").write_text(json.dumps({"id": "1", "text": "warfarin and aspirin given."}) + "\n", encoding="utf8")
    report = link_file(tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "ruler", progress=False)
    assert report["mentions"] == 2


def test_a_component_that_declares_nothing_is_trusted_with_a_warning(kb_dir, tmp_path, caplog):
    nlp = pipeline(kb_dir, [("s67_custom_ner", {})])
    assert scan_mention_finders(nlp.config) == (False, [], ["s67_custom_ner"])
    nlp.to_disk(tmp_path / "custom")
    with caplog.at_level(logging.WARNING, logger="spacy_pel.pipeline.mention_finders"):
        check_mention_source(tmp_path / "custom", "in.jsonl", given=False)
        check_finds_mentions(tmp_path / "custom", "--e2e")
    assert sum("s67_custom_ner before pel_linker declares nothing" in r.getMessage() for r in caplog.records) == 2
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spacy_pel.pipeline.mention_finders"):
        check_mention_source(tmp_path / "custom", None, given=True)  # mentions given: nothing to warn about
    assert not caplog.records
    # declared, and not the spans: refused; spaCy's own components declare all they set
    for name, factory in (("cats", "s67_custom_cats"), ("attr", "attribute_ruler"), ("clean", "doc_cleaner")):
        nlp = pipeline(kb_dir, [(factory, {})])
        assert scan_mention_finders(nlp.config) == (False, [], []), factory
        nlp.to_disk(tmp_path / name)
        with pytest.raises(InputError, match="is raw text .* cannot find mentions in it"):
            check_mention_source(tmp_path / name, "in.jsonl", given=False)
