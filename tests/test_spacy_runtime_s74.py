"""spaCy's runtime features on a pel_linker pipeline (probe hLL): ``Doc.to_json`` / ``from_json`` keep the
candidates and confidence; a disabled NER counts as absent for raw text, and is named; a disabled pel_linker is
reported as disabled, not missing; spaCy's ``add_pipe`` + ``from_bytes`` / ``from_disk`` recipe warns, naming
the settings it lost, instead of linking otherwise in silence."""
import json
import warnings

import pytest
import spacy
from spacy.tokens import Doc, Span
from typer.testing import CliRunner

from spacy_pel.cli import evaluate, link
from spacy_pel.files import InputError
from spacy_pel.pipeline.linker import find_linker
from spacy_pel.pipeline.mention_finders import check_finds_mentions, check_mention_source, scan_mention_finders
from spacy_pel.pipeline.settings_record import SETTINGS_FILE
from tests.test_cli_errors import corpus as gold

GROUP = {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc"}


@pytest.fixture(scope="module")
def kb(module_kb_dir):
    return module_kb_dir


def caught(call):
    with warnings.catch_warnings(record=True) as found:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in found]


# ------------------------------------------------------------------ bug01: to_json / from_json
def test_to_json_and_from_json_keep_the_candidates_and_the_confidence(kb):
    """Defect: from_json set the stored ``{"pel_by_label": …}`` value through a span without a label, which
    nested it under the label "": the restored spans had no candidates and no confidence."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "top_k": 2, "device": "cpu", "mentions": GROUP})
    doc = nlp.make_doc("Lithium carbonate toxicity with tricuspid regurgitation .")
    doc.spans["sc"] = [Span(doc, 0, 2, "Chemical"), Span(doc, 4, 6, "Disease")]
    doc = nlp(doc)
    data = json.loads(json.dumps(doc.to_json(underscore=["pel_candidates", "pel_confidence"])))  # as a file holds it
    back = Doc(nlp.vocab).from_json(data)
    want = [(s.kb_id_, s._.pel_candidates, s._.pel_confidence) for s in doc.spans["sc"]]
    assert all(c and isinstance(p, float) for _, c, p in want)
    assert [(s.kb_id_, s._.pel_candidates, s._.pel_confidence) for s in back.spans["sc"]] == want


def test_from_json_gives_each_label_at_the_same_offsets_its_own_value():
    nlp = spacy.blank("en")
    doc = nlp("Aspirin toxicity")
    doc.spans["sc"] = [Span(doc, 0, 1, "Chemical"), Span(doc, 0, 1, "Disease")]
    doc.spans["sc"][0]._.pel_confidence, doc.spans["sc"][1]._.pel_confidence = 0.9, 0.2
    back = Doc(nlp.vocab).from_json(doc.to_json(underscore=["pel_confidence"]))
    assert [(s.label_, s._.pel_confidence) for s in back.spans["sc"]] == [("Chemical", 0.9), ("Disease", 0.2)]
    back.spans["sc"][1]._.pel_confidence = 0.4  # set again the usual way: the other label's value is kept
    assert [s._.pel_confidence for s in back.spans["sc"]] == [0.9, 0.4]


# ------------------------------------------------------------------ bug02: a disabled NER
def ruler_pipeline(kb, tmp_path, disable=(), names=("pel_linker",)):
    nlp = spacy.blank("en")
    if len(names) > 1:
        nlp.add_pipe("pel_linker", name=names[0], config={"kb": str(kb), "device": "cpu"})
    ruler = nlp.add_pipe("entity_ruler")
    nlp.add_pipe("pel_linker", name=names[-1], config={"kb": str(kb), "top_k": 2, "device": "cpu"})
    ruler.add_patterns([{"label": "Chemical", "pattern": "Warfarin"}])
    for name in disable:
        nlp.disable_pipe(name)
    nlp.to_disk(tmp_path / "pipe")
    return nlp, tmp_path / "pipe"


def test_a_disabled_ner_finds_nothing_and_the_refusal_names_it(kb, tmp_path):
    """Defect: the config scan counted a disabled entity_ruler as the NER: link accepted the pipeline for raw
    text and wrote no mention (spacy.load never runs a disabled component)."""
    nlp, pipe = ruler_pipeline(kb, tmp_path, disable=["entity_ruler"])
    assert scan_mention_finders(nlp.config) == (False, [], [])
    assert scan_mention_finders(nlp.config, disabled=True) == (False, ["entity_ruler"], [])
    with pytest.raises(InputError, match=r"cannot find mentions in it: .*entity_ruler before it is disabled in its config"):
        check_mention_source(pipe, "raw.jsonl", given=False)
    with pytest.raises(InputError, match=r"entity_ruler before it is disabled"):
        check_finds_mentions(pipe, "--e2e")
    check_mention_source(pipe, None, given=True)  # mentions given: no NER needed
    (tmp_path / "raw.jsonl").write_text('{"id": "1", "text": "Warfarin was stopped."}\n', encoding="utf8")
    result = CliRunner().invoke(link.app, [str(tmp_path / "raw.jsonl"), str(tmp_path / "out.jsonl"), "--pipeline", str(pipe)])
    assert result.exit_code == 2 and "entity_ruler before it is disabled" in result.output, result.output
    assert not (tmp_path / "out.jsonl").exists()


def test_the_enabled_ner_of_the_first_enabled_linker_is_found(kb, tmp_path):
    """A disabled pel_linker is not the one whose mentions are looked for: the enabled one after the NER is."""
    nlp, pipe = ruler_pipeline(kb, tmp_path, disable=["first"], names=("first", "second"))
    assert scan_mention_finders(nlp.config) == (False, ["entity_ruler"], [])
    check_mention_source(pipe, "raw.jsonl", given=False)
    nlp.disable_pipe("second")
    with pytest.raises(ValueError, match=r"its pel_linker \('first', 'second'\) is disabled in its config"):
        scan_mention_finders(nlp.config)


# ------------------------------------------------------------------ bug03: a disabled pel_linker
def test_a_disabled_linker_is_reported_as_disabled(kb, tmp_path):
    """Defect: find_linker looked at the enabled components only: 'the pipeline has no pel_linker'."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "device": "cpu"})
    nlp.disable_pipe("pel_linker")
    for name in (None, "pel_linker"):
        with pytest.raises(InputError, match=r"pel_linker 'pel_linker' is disabled in this pipeline .*enable_pipe"):
            find_linker(nlp, name)
    with pytest.raises(InputError, match=r"no pel_linker called 'other'; its pel_linkers: pel_linker \(disabled\)"):
        find_linker(nlp, "other")
    nlp.to_disk(tmp_path / "pipe")
    for extra in ([], ["--linker", "pel_linker"]):
        result = CliRunner().invoke(evaluate.app, [str(gold(tmp_path)), "--pipeline", str(tmp_path / "pipe"), *extra])
        assert result.exit_code == 2, result.output
        assert "pel_linker 'pel_linker' is disabled" in result.output and "Traceback" not in result.output
    nlp.enable_pipe("pel_linker")
    assert find_linker(nlp)[0] == "pel_linker"


# ------------------------------------------------------------------ bug04: add_pipe + from_bytes / from_disk
def saved(kb, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "top_k": 3, "threshold": 0.5, "device": "cpu",
                                       "rules": {"repeats": {"@misc": "spacy_pel.rules.repeats.v1"}}})
    nlp.initialize()
    nlp.to_disk(tmp_path / "pipe")
    return nlp


def recipe():
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"device": "cpu"})
    return nlp


def test_the_add_pipe_recipe_warns_naming_the_settings_it_does_not_have(kb, tmp_path):
    """Defect: add_pipe + from_bytes read the saved encoder and KB into a linker with the factory's settings
    (no threshold, top_k 10, no rules), which linked otherwise with no word of it."""
    nlp = saved(kb, tmp_path)
    data = nlp.to_bytes()
    for load in (lambda: recipe().from_bytes(data), lambda: recipe().from_disk(tmp_path / "pipe")):
        loaded, said = caught(load)
        differ = [m for m in said if "other settings than those saved" in m]
        assert len(differ) == 1, said
        for part in ("top_k (saved 3, here 10)", "threshold (saved 0.5, here null)", "rules.repeats (saved {",
                     "spacy.load(DIR)", "load_model_from_config"):
            assert part in differ[0]
        assert not any("no NIL threshold" in m for m in said)  # the pipeline saved has one
        assert loaded.get_pipe("pel_linker").cfg.top_k == 10  # the config is the source of truth: warned, not applied


def test_a_load_with_the_saved_config_or_an_old_folder_does_not_warn(kb, tmp_path):
    nlp = saved(kb, tmp_path)
    data = nlp.to_bytes()
    assert json.loads((tmp_path / "pipe" / "pel_linker" / SETTINGS_FILE).read_text())["settings"]["threshold"] == 0.5
    for load in (lambda: spacy.util.load_model_from_config(nlp.config).from_bytes(data),
                 lambda: spacy.load(tmp_path / "pipe"),
                 lambda: spacy.load(tmp_path / "pipe", config={"components.pel_linker.top_k": 5})):  # meant: no warning
        loaded, said = caught(load)
        assert not said, said
    assert loaded.get_pipe("pel_linker").cfg.top_k == 5
    (tmp_path / "pipe" / "pel_linker" / SETTINGS_FILE).unlink()  # saved before the settings were recorded
    _, said = caught(lambda: recipe().from_disk(tmp_path / "pipe"))
    assert not any("other settings" in m for m in said), said
