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


def test_a_refused_setting_leaves_the_component_as_it_was(kb_dir, other_tiny_bert, tmp_path):
    """A value ``configure_linker`` or the ``threshold`` setter refuses is not kept half applied: before, the
    component kept threshold 5.0 (every mention NIL, silently) or another encoder's KB in its settings,
    while ``nlp.config`` still had the old value."""
    from spacy_pel.models.encoder import BiEncoder

    live = pipeline(kb_dir, threshold=0.5)
    before = linked(live(make_doc(live)))
    linker = live.get_pipe("pel_linker")
    with pytest.raises(ValueError, match="outside"):
        configure_linker(live, threshold=5.0)
    with pytest.raises(ValueError, match="outside"):
        linker.threshold = -3.0
    BiEncoder.from_pretrained(str(other_tiny_bert)).save(tmp_path / "other_encoder")
    (tmp_path / "kb2.jsonl").write_text("\n".join(OTHER_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "kb2.jsonl", tmp_path / "kb2", format="jsonl", encoder=str(tmp_path / "other_encoder"), progress=False)
    with pytest.raises(Exception, match="encoder"):
        configure_linker(live, kb=str(tmp_path / "kb2"))
    assert linker.cfg.threshold == 0.5 and linker.cfg.kb == str(kb_dir)
    assert live.get_pipe_config("pel_linker")["threshold"] == 0.5
    assert linked(live(make_doc(live))) == before
