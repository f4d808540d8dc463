"""KB self-alignment (spacy_pel.training.adapt), its pair losses and the shared negatives."""
import json
import logging
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.kb import read_kb
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.negatives import shared
from spacy_pel.models.pair_losses import info_nce_loss, make_pair_loss, multi_similarity_loss
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.adapt import KBNames, adapt
from spacy_pel.training.adapt_config import AdaptConfig, ConfigError

SYNONYM_KB = [
    {"id": f"E{i}", "name": name, "aliases": aliases, "types": ["T"]}
    for i, (name, aliases) in enumerate([
        ("lithium carbonate", ["Li2CO3", "lithium salt"]), ("tricuspid regurgitation", ["tricuspid insufficiency"]),
        ("atrial flutter", ["auricular flutter"]), ("aspirin", ["acetylsalicylic acid", "ASA"]),
        ("warfarin", ["coumadin"]), ("heart failure", ["cardiac failure", "HF"]), ("anemia", ["anaemia"]),
        ("kidney stone", ["renal calculus", "nephrolith"]), ("headache", ["cephalalgia"]), ("fever", ["pyrexia"]),
        ("hypertension", ["high blood pressure"]), ("nausea", []),
    ])
]


@pytest.fixture
def synonym_kb(tmp_path):
    path = tmp_path / "kb.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in SYNONYM_KB), encoding="utf8")
    return path


def settings(kb, encoder, **extra):
    base = {"kb.path": str(kb), "kb.format": "jsonl", "encoder.base": str(encoder), "training.batch_pairs": 4,
            "training.max_steps": 6, "training.eval_every": 3, "training.lr": 0.003, "training.eval_entities": 2,
            "training.eval_pool": 5, "negatives.per_batch": 3, "negatives.pool": 10, "negatives.refresh_every": 2}
    return {**base, **extra}


# ------------------------------------------------------------------ losses
def test_pair_losses_reward_grouped_labels_and_ignore_rows_without_positive():
    labels = torch.tensor([0, 0, 1, 1, 2])  # row 4 has no positive: a negative only
    grouped = torch.tensor([[1.0, 0.0], [0.99, 0.1], [0.0, 1.0], [0.1, 0.99], [-1.0, 0.0]])
    mixed = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.99, 0.1], [0.1, 0.99], [-1.0, 0.0]])
    for loss in (multi_similarity_loss, info_nce_loss):
        assert loss(grouped, labels) < loss(mixed, labels)
    assert multi_similarity_loss(torch.randn(3, 4), torch.tensor([0, 1, 2])) == 0  # no positives at all


def test_multi_similarity_mining_drops_easy_pairs():
    labels = torch.tensor([0, 0, 1, 1])
    easy = torch.tensor([[1.0, 0.0], [1.0, 0.01], [-1.0, 0.0], [-1.0, 0.01]])  # every positive far closer
    # with mining, easy negatives (S_in + ε < min_p S_ip) are dropped and only the positive term remains
    loss = multi_similarity_loss(easy, labels, epsilon=0.1)
    unmined = multi_similarity_loss(easy, labels, epsilon=10.0)
    assert loss < unmined


def test_make_pair_loss_refuses_unknown_names_and_settings():
    with pytest.raises(ValueError, match="must be one of"):
        make_pair_loss("triplet")
    with pytest.raises(ValueError, match="no setting"):
        make_pair_loss("info_nce", alpha=1.0)


# ------------------------------------------------------------------ shared negatives
def test_shared_negatives_give_every_mention_the_pool_without_its_gold():
    gold = [{0}, {1, 4}, {2}]
    rows, mask = shared(gold, [0, 1, 2], np.array([[5, 1], [6, 7], [4, 5]]))
    assert (rows == rows[0]).all() and sorted(rows[0]) == [0, 1, 2, 4, 5, 6, 7]
    for line, g in zip(range(3), gold):
        assert set(rows[line][~mask[line]]) == g  # exactly the gold rows masked


# ------------------------------------------------------------------ adapt
def test_kb_names_flatten_entities_with_distinct_names():
    entities = read_kb_records()
    names = KBNames(entities)
    assert len(names) == sum(1 + len(r["aliases"]) for r in SYNONYM_KB)
    assert names.names[names.first[3]] == "aspirin" and set(names.label[names.first[3]:names.first[3] + 3]) == {3}
    assert 11 not in names.multi() and 0 in names.multi()


def read_kb_records():
    from spacy_pel.kb import Entity
    return [Entity(r["id"], r["name"], r["aliases"], r["types"]) for r in SYNONYM_KB]


def test_adapt_trains_one_tower_writes_it_as_both_and_resumes(synonym_kb, tiny_encoder_dir, tmp_path):
    out = tmp_path / "adapted"
    state = adapt(None, out, settings(synonym_kb, tiny_encoder_dir), progress=False)
    assert state["step"] == 6 and (out / "adapt_log.json").exists()
    assert [h["step"] for h in state["history"]] == [3, 6]
    base, adapted = BiEncoder.from_pretrained(tiny_encoder_dir), BiEncoder.from_pretrained(out)
    ent = adapted.entity_model.state_dict()
    men = adapted.mention_model.state_dict()
    key = "encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(ent[key], base.entity_model.state_dict()[key])  # it learned
    assert all(torch.equal(men[k], v) for k, v in ent.items() if men[k].shape == v.shape)  # both towers alike
    emb = "embeddings.word_embeddings.weight"
    assert men[emb].shape[0] == ent[emb].shape[0] + 2  # the mention tower keeps its marker rows
    assert torch.equal(men[emb][: ent[emb].shape[0]], ent[emb])
    # a KB built with the base encoder is refused for the adapted one
    with pytest.raises(ValueError, match="built with entity encoder"):
        EntityIndex.build(read_kb(synonym_kb), base).check_encoder(adapted)



def test_adapt_resumes_a_run_its_time_budget_stopped(synonym_kb, tiny_encoder_dir, tmp_path, caplog):
    out = tmp_path / "adapted"
    cut = adapt(None, out, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 60, "training.eval_every": 30,
                                                                     "training.max_minutes": 0.001}), progress=False)
    assert 0 < cut["step"] < 60
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        state = adapt(None, out, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 60, "training.eval_every": 30}),
                      progress=False)
    assert "starting over" not in caplog.text  # the budget is not an input: the work folder is kept
    assert state["step"] == 60 and state["history"][: len(cut["history"])] == cut["history"]  # continued, its log kept


def test_adapt_starts_over_when_the_kb_changes(synonym_kb, tiny_encoder_dir, tmp_path):
    out = tmp_path / "adapted"
    adapt(None, out, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 3}), progress=False)
    with open(synonym_kb, "a", encoding="utf8") as f:
        f.write(json.dumps({"id": "E99", "name": "gout", "aliases": ["podagra"]}) + "\n")
    state = adapt(None, out, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 3}), progress=False)
    assert [h["step"] for h in state["history"]] == [3] and state["entities"] == len(SYNONYM_KB) + 1


def test_adapt_time_budget_stops_early_and_evaluates_where_it_stopped(synonym_kb, tiny_encoder_dir, tmp_path):
    state = adapt(None, tmp_path / "a", settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 500,
                                                                                  "training.max_minutes": 0.001}),
                  progress=False)
    assert 0 < state["step"] < 500 and state["history"][-1]["step"] == state["step"]


def test_adapt_config_errors_name_the_key(synonym_kb, tiny_encoder_dir, tmp_path):
    with pytest.raises(ConfigError, match=r"\[loss\] name"):
        AdaptConfig.from_config({"kb": {"path": "x"}, "loss": {"name": "triplet"}})
    with pytest.raises(ConfigError, match=r"\[training\] batch_pairs"):
        AdaptConfig.from_config({"kb": {"path": "x"}, "training": {"batch_pairs": 0}})
    with pytest.raises(ConfigError, match=r"\[kb\] path"):
        AdaptConfig.from_config({})


def test_adapt_cli_one_line_errors_and_a_run(synonym_kb, tiny_encoder_dir, tmp_path):
    runner = CliRunner()
    bad = runner.invoke(app, ["adapt", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "error: KB not found" in bad.output
    single = tmp_path / "single.jsonl"
    single.write_text(json.dumps({"id": "A", "name": "a"}) + "\n" + json.dumps({"id": "B", "name": "b"}) + "\n", encoding="utf8")
    for objective in ("names", "retriever"):
        bad = runner.invoke(app, ["adapt", str(single), "-o", str(tmp_path / "x"), "--encoder", str(tiny_encoder_dir),
                                  "--objective", objective])
        assert bad.exit_code == 2 and "needs synonyms" in bad.output, bad.output
    bad = runner.invoke(app, ["adapt", str(synonym_kb), "-o", str(tmp_path / "x"), "--objective", "nope"])
    assert bad.exit_code == 2 and "unknown objective" in bad.output
    args = ["adapt", str(synonym_kb), "-o", str(tmp_path / "enc"), "--objective", "names", "--encoder", str(tiny_encoder_dir), "--max-steps", "2",
            "--training.eval_entities", "2", "--training.batch_pairs", "3", "--negatives.pool", "6"]
    ok = runner.invoke(app, args)
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output[ok.output.index("{"):])["step"] == 2
    # the retriever objective with no held-out entity to select on: no best score, printed as strict JSON (null, not NaN)
    ok = runner.invoke(app, ["adapt", str(synonym_kb), "-o", str(tmp_path / "enc2"), "--encoder", str(tiny_encoder_dir),
                             "--max-steps", "1", "--synonyms.eval_entities", "0", "--negatives.pool", "6"])
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.output[ok.output.index("{"):], parse_constant=lambda c: pytest.fail(f"{c} in the report"))
    assert report["step"] == 1 and report["best"] is None


def test_adapt_refuses_an_output_it_would_destroy(synonym_kb, tiny_encoder_dir, tmp_path, monkeypatch):
    """-o is replaced at the end: a file, a folder of other files or a foreign OUTPUT.work is refused in one
    line before any work, and left as it was; a new or empty folder, or an encoder folder, is written."""
    from spacy_pel.cli import adapt as adapt_cli
    from spacy_pel.files import InputError

    thesis = tmp_path / "mine"
    thesis.mkdir()
    (thesis / "thesis.txt").write_text("data", encoding="utf8")
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x", encoding="utf8")
    (tmp_path / "w.work").mkdir()
    (tmp_path / "w.work" / "keep.txt").write_text("d", encoding="utf8")
    monkeypatch.setattr(adapt_cli, "adapt_retriever", lambda *a, **k: pytest.fail("adapt started"))
    runner = CliRunner()
    for output, words in ((thesis, "not an encoder folder"), (a_file, "is a file"), (tmp_path / "w", "not a work folder")):
        for objective in ("retriever", "names"):
            bad = runner.invoke(app, ["adapt", str(synonym_kb), "-o", str(output), "--encoder", str(tiny_encoder_dir),
                                      "--max-steps", "1", "--objective", objective])
            assert bad.exit_code == 2 and words in bad.output and len(bad.output.strip().splitlines()) == 1, bad.output
    with pytest.raises(InputError, match="not an encoder folder"):  # the library refuses it too
        adapt(None, thesis, settings(synonym_kb, tiny_encoder_dir), progress=False)
    assert (thesis / "thesis.txt").read_text(encoding="utf8") == "data" and sorted(p.name for p in thesis.iterdir()) == ["thesis.txt"]
    assert a_file.read_text(encoding="utf8") == "x" and (tmp_path / "w.work" / "keep.txt").exists()
    assert not list(tmp_path.glob(".*"))  # nothing hidden left behind
    empty = tmp_path / "empty"
    empty.mkdir()
    adapt(None, empty, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 1}), progress=False)
    assert (empty / "pel_encoder.json").exists()
    # its own earlier output (an encoder folder) is written again: the run resumes from empty.work
    state = adapt(None, empty, settings(synonym_kb, tiny_encoder_dir, **{"training.max_steps": 2}), progress=False)
    assert state["step"] == 2


def test_start_encoder_identity_is_a_folders_content_or_a_name(tiny_encoder_dir, tmp_path):
    from spacy_pel.training.adapt import start_encoder_identity

    assert start_encoder_identity("all-MiniLM-L6-v2", tmp_path / "out") == {"name": "all-MiniLM-L6-v2"}
    start = tmp_path / "start"
    shutil.copytree(tiny_encoder_dir, start)
    first = start_encoder_identity(str(start), tmp_path / "out")
    assert first == start_encoder_identity(str(tiny_encoder_dir), tmp_path / "out")  # a copy is the same encoder
    (start / "out.work").mkdir()  # the run's own output and work folder inside the start folder do not count
    (start / "out.work" / "inputs.json").write_text("{}", encoding="utf8")
    assert start_encoder_identity(str(start), start / "out") == first
    (start / "tokenizer" / "vocab.txt").write_text("changed", encoding="utf8")
    assert start_encoder_identity(str(start), start / "out") != first


def test_adapt_starts_over_when_the_start_encoder_changes(synonym_kb, tiny_encoder_dir, other_tiny_bert, tmp_path,
                                                          caplog):
    """Another encoder under the same --encoder path: the work folder made from the old one is discarded, and
    the output is the new encoder's, as a run into a new folder writes it."""
    start, out = tmp_path / "start", tmp_path / "adapted"
    shutil.copytree(tiny_encoder_dir, start)
    adapt(None, out, settings(synonym_kb, start, **{"training.max_steps": 3}), progress=False)
    old = BiEncoder.from_pretrained(out).fingerprint()
    shutil.rmtree(start)
    BiEncoder.from_pretrained(other_tiny_bert).save(start)
    with caplog.at_level(logging.WARNING, logger="spacy_pel.training.adapt"):
        adapt(None, out, settings(synonym_kb, start, **{"training.max_steps": 3}), progress=False)
    assert "another start encoder" in caplog.text and "starting over" in caplog.text
    fresh = tmp_path / "fresh"
    adapt(None, fresh, settings(synonym_kb, start, **{"training.max_steps": 3}), progress=False)
    assert BiEncoder.from_pretrained(out).fingerprint() == BiEncoder.from_pretrained(fresh).fingerprint() != old


def test_a_kb_of_one_entity_is_refused_in_one_line(tiny_encoder_dir, tmp_path):
    """README's quickstart KB has one entity: with no other entity there is no negative, and adapt (either
    objective) says so in one line instead of failing deep in negative sampling."""
    kb = tmp_path / "one.jsonl"
    kb.write_text('{"id": "X:1", "name": "acetylsalicylic acid", "aliases": ["aspirin", "ASA"]}\n', encoding="utf8")
    for objective in ("retriever", "names"):
        out = CliRunner().invoke(app, ["adapt", str(kb), "-o", str(tmp_path / f"enc_{objective}"), "--encoder",
                                       str(tiny_encoder_dir), "--max-steps", "2", "--objective", objective])
        assert out.exit_code == 2 and len(out.output.strip().splitlines()) == 1, out.output
        assert "1 entity; training needs at least 2" in out.output
