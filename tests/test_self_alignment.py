"""KB self-alignment in the retriever's formats (spacy_pel.training.self_alignment, .synonyms)."""
import json
import logging
import shutil

import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.kb import Entity, read_kb
from spacy_pel.models.encoder import BiEncoder, Mention
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training import retriever as retriever_module
from spacy_pel.training.config import ConfigError, RetrieverConfig
from spacy_pel.training.self_alignment import DEFAULTS, adapt_retriever, retriever_adapt_config
from spacy_pel.training.synonyms import split_synonyms, synonym_pairs

from .test_adapt import SYNONYM_KB, synonym_kb  # noqa: F401 (fixture)


def settings(kb, encoder, **extra):
    base = {"paths.kb": str(kb), "paths.kb_format": "jsonl", "encoder.base": str(encoder), "synonyms.steps": 30,
            "synonyms.eval_entities": 1, "training.batch_size": 8, "training.lr": 0.003, "training.warmup": 0.0,
            "training.eval_every": 15, "training.eval_kb_sample": 4, "negatives.pool": 8, "negatives.refresh_every": 10,
            "training.precision": "fp32"}
    return {**base, **extra}


def margin(encoder: BiEncoder, entities, pairs) -> float:
    """Mean cosine of each synonym (as a marked mention) to its own entity row minus to the others."""
    m = torch.from_numpy(encoder.encode_mentions([Mention(t, 0, len(t)) for t, _ in pairs]))
    e = torch.from_numpy(encoder.encode_entities(entities))
    sims = torch.nn.functional.normalize(m, dim=-1) @ torch.nn.functional.normalize(e, dim=-1).T
    own = torch.tensor([row for _, row in pairs])
    mask = torch.zeros_like(sims, dtype=torch.bool)
    mask[torch.arange(len(pairs)), own] = True
    return float(sims[mask].mean() - sims[~mask].mean())


def test_split_synonyms_holds_out_whole_entities():
    entities = [Entity(r["id"], r["name"], r["aliases"], r["types"]) for r in SYNONYM_KB] * 5
    train, queries = split_synonyms(entities, 3, seed=0)
    held = {row for _, row in queries}
    assert len(held) == 3 and not held & {row for _, row in train}  # none of their synonyms is trained on
    assert all(text in entities[row].aliases for text, row in queries)
    assert len(train) + sum(len(entities[r].aliases) for r in held) == len(synonym_pairs(entities))
    assert split_synonyms(entities, 3, seed=0) == (train, queries)  # the same for a seed


def test_adapt_pulls_synonyms_to_their_entity_rows_with_both_towers(synonym_kb, tiny_encoder_dir, tmp_path):  # noqa: F811
    out = tmp_path / "adapted"
    state = adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir, **{"synonyms.eval_entities": 0}),
                            progress=False)
    assert state["step"] == 30
    entities = read_kb(synonym_kb)
    pairs = synonym_pairs(entities)
    base, adapted = BiEncoder.from_pretrained(tiny_encoder_dir), BiEncoder.from_pretrained(out)
    assert margin(adapted, entities, pairs) > margin(base, entities, pairs) + 0.1  # synonyms pulled to their own rows
    key = "encoder.layer.0.attention.self.query.weight"
    for tower in ("mention_model", "entity_model"):  # both towers learned
        assert not torch.equal(getattr(adapted, tower).state_dict()[key], getattr(base, tower).state_dict()[key])
    with pytest.raises(ValueError, match="built with entity encoder"):  # the base's KB is refused
        EntityIndex.build(entities, base).check_encoder(adapted)


def test_shuffled_positives_do_not_pull_synonyms_together(synonym_kb, tiny_encoder_dir, tmp_path, monkeypatch):  # noqa: F811
    """The margin test above fails when the positives are wrong: it measures the pairing, not training."""
    real = retriever_module.split_synonyms

    def shuffled(entities, held_out, seed):
        train, queries = real(entities, held_out, seed)
        rows = np.random.default_rng(1).permutation([row for _, row in train])
        return [(t, int(r)) for (t, _), r in zip(train, np.roll(rows, 3))], queries

    monkeypatch.setattr(retriever_module, "split_synonyms", shuffled)
    real_inputs = retriever_module.pair_inputs  # the KB's own owners of a synonym not added back as gold
    monkeypatch.setattr(retriever_module, "pair_inputs", lambda encoder, pairs, names=None: real_inputs(encoder, pairs))
    out = tmp_path / "shuffled"
    adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir, **{"synonyms.eval_entities": 0}), progress=False)
    entities = read_kb(synonym_kb)
    pairs = synonym_pairs(entities)
    base, adapted = BiEncoder.from_pretrained(tiny_encoder_dir), BiEncoder.from_pretrained(out)
    assert margin(adapted, entities, pairs) < margin(base, entities, pairs) + 0.1


def test_adapt_resumes_and_starts_over_when_the_kb_changes(synonym_kb, tiny_encoder_dir, tmp_path, caplog):  # noqa: F811
    out = tmp_path / "adapted"
    cut = adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir, **{"training.max_minutes": 0.001}),
                          progress=False)
    assert 0 < cut["step"] < 30  # stopped by the time budget, evaluated where it stopped
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        first = adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir), progress=False)
    assert "starting over" not in caplog.text and first["step"] == 30 and "dev_r1" in first["history"][0]
    assert first["history"][: len(cut["history"])] == cut["history"]  # resumed: the cut run's log goes on
    with open(synonym_kb, "a", encoding="utf8") as f:
        f.write(json.dumps({"id": "E99", "name": "gout", "aliases": ["podagra"]}) + "\n")
    again = adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir), progress=False)
    assert [h["step"] for h in again["history"]] == [15, 30]  # a changed KB: the stale work was discarded


def test_time_budget_stops_the_synonym_stage_early(synonym_kb, tiny_encoder_dir, tmp_path):  # noqa: F811
    state = adapt_retriever(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir, **{
        "synonyms.steps": 500, "training.max_minutes": 0.002}), progress=False)
    assert 0 < state["step"] < 500 and state["history"][-1]["step"] == state["step"]


def test_the_shipped_config_is_the_built_in_defaults():
    file = retriever_adapt_config("configs/adapt.cfg", {"paths.kb": "k", "paths.kb_format": "jsonl"})
    built_in = retriever_adapt_config(None, {"paths.kb": "k", "training.max_minutes": 0.0})
    assert file == built_in
    assert RetrieverConfig.from_config(built_in).training.train_entity_encoder
    assert set(DEFAULTS) <= {f"{s}.{k}" for s in built_in for k in built_in[s]}


def test_a_saved_start_encoder_keeps_its_input_lengths(synonym_kb, tiny_encoder_dir, tmp_path):  # noqa: F811
    start = tmp_path / "trained"
    BiEncoder.from_pretrained(tiny_encoder_dir, mention_max_length=48, entity_max_length=40,
                              entity_text="description_or_synonyms").save(start)
    adapt_retriever(None, tmp_path / "a", settings(synonym_kb, start, **{"synonyms.steps": 2}), progress=False)
    kept = BiEncoder.from_pretrained(tmp_path / "a").config
    assert (kept.mention_max_length, kept.entity_max_length) == (48, 40)  # not the adapt defaults (32, 32)
    assert kept.entity_text == "description_or_synonyms"  # the rows it was trained against, not the default
    adapt_retriever(None, tmp_path / "b", settings(synonym_kb, start, **{"synonyms.steps": 2, "encoder.entity_max_length": 24}),
                    progress=False)
    assert BiEncoder.from_pretrained(tmp_path / "b").config.entity_max_length == 24  # the command line wins


def test_replayed_training_mentions_join_the_synonym_batches(synonym_kb, tiny_encoder_dir, tmp_path, caplog):  # noqa: F811
    """``synonyms.replay``: the mentions of a training corpus whose gold is in the KB share every batch of
    the synonym stage; with ``training.epochs 0`` no mention stage follows."""
    nlp = spacy.blank("en")
    docs = []
    for text, a, b, kb_id in [("Lithium salt toxicity was seen.", 0, 2, "E0"), ("He had high fever.", 2, 4, "E9"),
                              ("Bevacizumab caused harm.", 0, 1, "X7")]:  # X7: not in the KB, not replayed
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=kb_id)]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    write_docbin(docs, tmp_path / "train.spacy")
    extra = {"paths.train": str(tmp_path / "train.spacy"), "synonyms.replay": 0.25, "training.epochs": 0,
             "synonyms.steps": 6}
    cfg = RetrieverConfig.from_config(retriever_adapt_config(None, settings(synonym_kb, tiny_encoder_dir, **extra)))
    task = retriever_module.RetrieverTask(cfg)
    assert [(s.name, s.steps, s.replayed, s.replay_per_batch) for s in task.stages] == [("synonyms", 6, 2, 2)]
    batch = next(iter(task.batches(0)))
    assert [sorted(g) for g in batch.examples.gold[-2:]] in ([[0], [9]], [[9], [0]])  # both replayed mentions
    state = adapt_retriever(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    assert [h["step"] for h in state["history"]] == [6]
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        adapt_retriever(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
        assert not caplog.records  # the same inputs: the work folder is kept
        write_docbin(docs[1:], tmp_path / "train.spacy")  # another corpus under the same name: the old work is discarded
        adapt_retriever(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
        assert "starting over" in caplog.text
    with pytest.raises(ConfigError, match="replay"):  # no corpus to replay
        RetrieverConfig.from_config(retriever_adapt_config(None, settings(synonym_kb, tiny_encoder_dir,
                                                                          **{"synonyms.replay": 0.25})))


def test_nothing_to_train_writes_the_start_encoder_as_it_is(synonym_kb, tiny_encoder_dir, tmp_path):  # noqa: F811
    """``synonyms.steps`` 0 and no mention stage (the transfer workflow's ``--vars.transfer_steps 0``): the
    start encoder, a folder this package saved, is copied file for file; a model name is saved as loaded."""
    start = tmp_path / "trained"
    BiEncoder.from_pretrained(tiny_encoder_dir, mention_max_length=48).save(start)
    (start / "mention_centre.npy").write_bytes(b"kept")  # a file the encoder's loader does not know
    doc = spacy.blank("en").make_doc("Lithium salt toxicity was seen.")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 2, label="X", kb_id="E0")]
    doc.ents = list(doc.spans[GOLD_KEY])
    write_docbin([doc], tmp_path / "train.spacy")
    replay = {"paths.train": str(tmp_path / "train.spacy"), "synonyms.replay": 0.25, "training.epochs": 0}
    state = adapt_retriever(None, tmp_path / "a", settings(synonym_kb, start, **{"synonyms.steps": 0, **replay}),
                            progress=False)
    assert state["step"] == 0 and state["unchanged"] == str(start)
    copied = BiEncoder.from_pretrained(tmp_path / "a")
    assert copied.fingerprint() == BiEncoder.from_pretrained(start).fingerprint()
    assert copied.config.mention_max_length == 48 and (tmp_path / "a" / "mention_centre.npy").read_bytes() == b"kept"
    with pytest.raises(ConfigError, match="encoder.mention_max_length"):  # its weights were not trained with it
        adapt_retriever(None, tmp_path / "b", settings(synonym_kb, start, **{"synonyms.steps": 0,
                                                                           "encoder.mention_max_length": 24}))
    adapt_retriever(None, tmp_path / "c", settings(synonym_kb, tiny_encoder_dir, **{"synonyms.steps": 0}), progress=False)
    assert BiEncoder.from_pretrained(tmp_path / "c").fingerprint() == BiEncoder.from_pretrained(tiny_encoder_dir).fingerprint()
    # a mention stage still trains with no synonym step
    state = adapt_retriever(None, tmp_path / "d", settings(synonym_kb, tiny_encoder_dir, **{
        "synonyms.steps": 0, "paths.train": str(tmp_path / "train.spacy"), "training.max_steps": 1}), progress=False)
    assert "unchanged" not in state


def test_with_nothing_held_out_the_last_step_is_written(synonym_kb, tiny_encoder_dir, tmp_path, caplog):  # noqa: F811
    """No held-out entity (eval_entities 0, or fewer than ten entities with synonyms): dev_r1 is NaN at every
    evaluation, so nothing can choose; the model of the last step is written, and the report says so."""
    out = tmp_path / "a"
    extra = {"synonyms.eval_entities": 0}
    with caplog.at_level(logging.INFO, logger="spacy_pel"):
        state = adapt_retriever(None, out, settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    assert [h["step"] for h in state["history"]] == [15, 30]
    assert state["best"] is None and state["best_step"] == 30 and "no dev metric" in state["selected"]
    assert "last step" in caplog.text
    last = BiEncoder.from_pretrained(tmp_path / "a.work" / "last" / "encoder").fingerprint()
    assert BiEncoder.from_pretrained(out).fingerprint() == last
    assert json.loads((out / "adapt_log.json").read_text(encoding="utf8"))["best_step"] == 30
    # the same when a time budget cut the run and it resumed
    cut = adapt_retriever(None, tmp_path / "b", settings(synonym_kb, tiny_encoder_dir, **extra, **{"training.max_minutes": 0.001}),
                          progress=False)
    assert cut["step"] < 30 and cut["best_step"] == cut["step"]
    state = adapt_retriever(None, tmp_path / "b", settings(synonym_kb, tiny_encoder_dir, **extra), progress=False)
    assert state["step"] == 30 and state["best_step"] == 30 and state["best"] is None
    last = BiEncoder.from_pretrained(tmp_path / "b.work" / "last" / "encoder").fingerprint()
    assert BiEncoder.from_pretrained(tmp_path / "b").fingerprint() == last


def test_adapt_starts_over_when_the_start_encoder_changes(synonym_kb, tiny_encoder_dir, other_tiny_bert,  # noqa: F811
                                                          tmp_path, caplog):
    """``cp -r enc X; adapt -o A --encoder X; rm -rf X; cp -r enc2 X; adapt -o A --encoder X``: the second run
    starts over from the new X (the path is the same, the encoder is not)."""
    start, out = tmp_path / "start", tmp_path / "a"
    extra = {"synonyms.steps": 4, "training.eval_every": 4}
    shutil.copytree(tiny_encoder_dir, start)
    adapt_retriever(None, out, settings(synonym_kb, start, **extra), progress=False)
    old = BiEncoder.from_pretrained(out).fingerprint()
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        adapt_retriever(None, out, settings(synonym_kb, start, **extra), progress=False)
        assert "starting over" not in caplog.text  # the same encoder: resumed
        shutil.rmtree(start)
        BiEncoder.from_pretrained(other_tiny_bert).save(start)
        adapt_retriever(None, out, settings(synonym_kb, start, **extra), progress=False)
    assert "another start encoder" in caplog.text and "starting over" in caplog.text
    adapt_retriever(None, tmp_path / "fresh", settings(synonym_kb, start, **extra), progress=False)
    new = BiEncoder.from_pretrained(out).fingerprint()
    assert new != old and new == BiEncoder.from_pretrained(tmp_path / "fresh").fingerprint()
