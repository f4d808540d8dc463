"""``configure_linker`` on a linker that has linked (it holds its encoder and KB): the settings read when
resources load — ``context_window``, ``precision``, ``search_precision``, ``kb`` — take effect at once, as
in a pipeline made (or saved and reloaded) with them. Before, only ``cfg`` and ``nlp.config`` changed: the
live pipeline kept linking with the old context / KB, and its saved copy linked otherwise."""
import pytest
import spacy

from spacy_pel.pipeline.linker import configure_linker
from spacy_pel.retrieval.build import build_kb
from tests.test_linker import linked, make_doc

OTHER_KB = ['{"id": "Z1", "name": "aspirin", "types": ["Chemical"]}', '{"id": "Z2", "name": "flutter", "types": ["Disease"]}']


def pipeline(kb, **settings):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb), "top_k": 3, "device": "cpu", **settings})  # settings' kb wins
    return nlp


@pytest.fixture
def other_kb(tmp_path, tiny_encoder_dir):
    (tmp_path / "other.jsonl").write_text("\n".join(OTHER_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "other.jsonl", tmp_path / "other_kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return tmp_path / "other_kb"


@pytest.mark.parametrize("setting", [{"context_window": 8}, {"precision": "bf16"}, {"search_precision": "fp32"}, "kb"])
def test_a_changed_setting_takes_effect_on_the_held_resources(kb_dir, other_kb, tmp_path, setting):
    setting = {"kb": str(other_kb)} if setting == "kb" else setting
    live = pipeline(kb_dir)
    live(make_doc(live))  # loads encoder and KB
    configure_linker(live, **setting)
    expected = linked(pipeline(**{"kb": kb_dir, **setting})(make_doc(live)))
    assert linked(live(make_doc(live))) == expected
    live.to_disk(tmp_path / "saved")
    reloaded = spacy.load(tmp_path / "saved")
    assert linked(reloaded(make_doc(reloaded))) == expected


def test_context_window_changes_what_the_encoder_reads(kb_dir):
    live = pipeline(kb_dir)
    live(make_doc(live))
    configure_linker(live, context_window=8)
    assert live.get_pipe("pel_linker").encoder.config.mention_max_length == 8
