"""``spacy_pel.tokenizer.v1``: the extra splits a span finder needs in biomedical text."""
import spacy

from spacy_pel.pipeline.tokenizer import NAME

CONFIG = {"nlp": {"tokenizer": {"@tokenizers": NAME}}}


def words(nlp, text):
    return [t.text for t in nlp(text)]


def test_splits_at_brackets_and_hyphens_where_mentions_end():
    nlp = spacy.blank("en", config=CONFIG)  # found through the entry point, as spacy.load finds it
    assert words(nlp, "(BHA)-induced") == ["(", "BHA", ")", "-", "induced"]
    assert words(nlp, "[3H]nicotine binding") == ["[", "3H", "]", "nicotine", "binding"]
    assert words(nlp, "thallium-201 SPECT") == ["thallium", "-", "201", "SPECT"]
    assert words(nlp, "piperacillin- vs tobramycin-induced") == ["piperacillin", "-", "vs", "tobramycin", "-", "induced"]
    # what spaCy's English tokenizer keeps whole stays whole: abbreviations, decimals
    assert words(nlp, "e.g. 1.6 mg U.S.") == ["e.g.", "1.6", "mg", "U.S."]
    default = spacy.blank("en")
    assert "BHA" not in words(default, "(BHA)-induced") and "nicotine" not in words(default, "[3H]nicotine")
    text = "Famotidine-associated delirium after (BHA)-induced [3H]nicotine uptake."
    assert nlp(text).text == text  # no character lost or added


def test_a_saved_pipeline_keeps_the_tokenizer(tmp_path):
    nlp = spacy.blank("en", config=CONFIG)
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.config["nlp"]["tokenizer"]["@tokenizers"] == NAME
    assert words(loaded, "(BHA)-induced") == ["(", "BHA", ")", "-", "induced"]
