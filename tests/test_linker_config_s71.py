"""What a pipeline author sets, trains or swaps in ``pel_linker`` is what it keeps: a trained encoder is the
one a saved pipeline loads, a refused KB swap changes nothing, ``configure_linker`` writes the checked
values into ``nlp.config``, and invalid values are refused where the component is made, naming their part."""
import numpy as np
import pytest
import spacy
import torch
from thinc.api import Adam

from spacy_pel.pipeline.linker import configure_linker
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import build_names
from tests.test_configure_linker import OTHER_KB
from tests.test_linker import linked, make_doc
from tests.test_spacy_commands import examples


def first_weight(nlp):
    linker = nlp.get_pipe("pel_linker")
    linker.ensure_loaded()  # a path other than the saved copy's loads on first use
    return next(linker.encoder.mention_model.parameters()).detach().clone()


def test_a_trained_encoder_is_the_one_the_saved_pipeline_loads_when_the_config_names_an_encoder(
        kb_dir, tiny_encoder_dir, tmp_path):
    """Defect: `update` left the held encoder with no source, so sources.json recorded none and spacy.load,
    seeing the config's `encoder` path, read the untrained weights from it (model-best lost its training)."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "top_k": 3, "device": "cpu",
                                       "threshold": 0.0})
    nlp.initialize()
    untrained = first_weight(nlp)
    sgd = Adam(0.01)
    for _ in range(2):
        nlp.update(examples(nlp), sgd=sgd)
    trained = first_weight(nlp)
    assert not torch.equal(trained, untrained)
    nlp.to_disk(tmp_path / "pipe")
    assert torch.equal(first_weight(spacy.load(tmp_path / "pipe")), trained)
    other = spacy.load(tmp_path / "pipe", config={"components.pel_linker.encoder": str(tmp_path / "pipe" / "pel_linker" / "encoder")})
    assert torch.equal(first_weight(other), trained)  # another spelling of an encoder: read from there


def test_a_refused_kb_swap_leaves_every_rule_on_the_kb_held(kb_dir, tiny_encoder_dir, tmp_path):
    """Defect: the linker took the new KB before its rules accepted it; when the name rows (built for the
    old KB) refused it, the linker held the new KB while the alias table read the old KB's row numbers."""
    build_names(kb_dir, tmp_path / "names", progress=False)
    (tmp_path / "other.jsonl").write_text("\n".join(OTHER_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "other.jsonl", tmp_path / "other_kb", encoder=str(tiny_encoder_dir), progress=False)
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3, "device": "cpu", "rules": {
        "aliases": {"@misc": "spacy_pel.rules.alias_table.v1"},
        "names": {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(tmp_path / "names")}}})
    before = linked(nlp(make_doc(nlp)))
    with pytest.raises(ValueError, match="another KB"):
        configure_linker(nlp, kb=str(tmp_path / "other_kb"))
    linker = nlp.get_pipe("pel_linker")
    assert len(linker.index) == 5 and linker.sources["kb"] == str(kb_dir)
    assert linked(nlp(make_doc(nlp))) == before


def test_configure_linker_writes_the_checked_values_into_the_config(kb_dir, tmp_path):
    """Defect: a Path was written into nlp.config as given (nlp.config and to_disk then failed with a
    SystemError); numpy numbers, e.g. a threshold read from a score array, were refused."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "device": "cpu"})
    configure_linker(nlp, kb=kb_dir, threshold=np.float32(0.25), top_k=np.int64(3))
    block = nlp.config["components"]["pel_linker"]
    assert (block["kb"], block["threshold"], block["top_k"]) == (str(kb_dir), 0.25, 3)
    assert type(block["top_k"]) is int and type(block["threshold"]) is float
    nlp.to_disk(tmp_path / "pipe")
    assert spacy.load(tmp_path / "pipe").get_pipe("pel_linker").cfg.top_k == 3


def test_invalid_values_are_refused_where_the_component_is_made_naming_their_part(kb_dir):
    """Defects: alias_rows' weight was reported as name_rows' (both are in configs/linker_rules.cfg); a
    threshold outside the KB's cosine range was accepted until the first document."""
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match=r"alias_rows\.v1: `weight`"):
        nlp.add_pipe("pel_linker", config={"rules": {"r": {"@misc": "spacy_pel.rules.alias_rows.v1", "weight": 1.5}}})
    with pytest.raises(ValueError, match=r"threshold 2\.0 is outside \[-1, 1\]"):
        nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "threshold": 2.0})
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    with pytest.raises(ValueError, match="outside"):
        configure_linker(nlp, threshold=5.0)  # before the KB is loaded too
    assert nlp.config["components"]["pel_linker"]["threshold"] is None
