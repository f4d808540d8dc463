"""Name-level retrieval (spacy_pel/retrieval/names.py) and the ``spacy_pel.rules.name_rows.v1`` rule."""
import gc
import json
import logging
import pickle

import numpy as np
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.models.encoder import BiEncoder, EncoderMismatchError
from spacy_pel.pipeline.rules.name_rows import NAMES_FOLDER, merge_candidates
from spacy_pel.retrieval.build import STAMP_FILE, build_kb
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex, build_names, entity_names

from .conftest import KB_LINES

# KB_LINES (conftest): D1 lithium carbonate / Li2CO3, D2 tricuspid regurgitation, D3 atrial flutter /
# flutter, D4 aspirin / acetylsalicylic acid, D5 warfarin: 8 names of 5 entities
TEXT = "Li2CO3 toxicity , then atrial-flutter and tricuspid valve leak"
SPANS = ((0, 1, "Chemical"), (4, 7, "Disease"), (8, 11, "Disease"))


@pytest.fixture
def names_dir(kb_dir):
    build_names(kb_dir, progress=False)
    return kb_dir / "names"


def _vectors(names: NameIndex, rows) -> np.ndarray:
    return names.searcher.matrix[list(rows)].float().numpy()


def test_names_are_distinct_per_entity_after_normalising():
    from spacy_pel.kb import Entity

    entity = Entity(id="X", name="Atrial Flutter", aliases=["atrial-flutter", "Flutter, Atrial", "flutter"])
    assert entity_names(entity) == ["Atrial Flutter", "Flutter, Atrial", "flutter"]


def test_each_entity_is_returned_once_by_its_best_name(names_dir):
    names = NameIndex.from_disk(names_dir)
    assert len(names) == 8 and sorted(set(names.entity_rows.tolist())) == [0, 1, 2, 3, 4]
    rng = np.random.default_rng(0)
    queries = rng.normal(size=(6, names.searcher.matrix.shape[1])).astype(np.float32)
    scores, rows = names.search(queries, 5)
    every = (queries @ _vectors(names, range(len(names))).T)
    for q in range(len(queries)):
        assert sorted(rows[q].tolist()) == [0, 1, 2, 3, 4]  # all five, each once
        best = {r: every[q][names.entity_rows == r].max() for r in range(5)}
        assert scores[q] == pytest.approx([best[r] for r in rows[q]], abs=0.02)  # bf16 matrix
        assert list(scores[q]) == sorted(scores[q], reverse=True)
    s7, r7 = names.search(queries, 7)  # more than the KB holds: padded with -1
    assert (r7[:, 5:] == -1).all() and (r7[:, :5] == rows).all()


def test_best_name_scores_match_brute_force(names_dir):
    names = NameIndex.from_disk(names_dir)
    rng = np.random.default_rng(1)
    queries = rng.normal(size=(3, names.searcher.matrix.shape[1])).astype(np.float32)
    rows = np.array([[2, -1, 0], [4, 3, 3], [-1, -1, 1]])
    got = names.best_name_scores(queries, rows)
    every = queries @ _vectors(names, range(len(names))).T
    for q in range(3):
        for c, r in enumerate(rows[q]):
            want = -np.inf if r < 0 else every[q][names.entity_rows == r].max()
            assert got[q, c] == pytest.approx(want, abs=1e-4)


@pytest.mark.parametrize("mode", ["max", "names", "mean"])
def test_a_vector_equal_to_a_name_finds_its_entity_first(names_dir, kb_dir, mode):
    names, index = NameIndex.from_disk(names_dir), EntityIndex.from_disk(kb_dir)
    queries = _vectors(names, range(len(names)))  # each name's own vector (norm 1)
    _, retrieved = index.search(queries, 3)
    scores, rows = merge_candidates(names, index.vectors, queries, retrieved, mode, 0.9)
    assert rows[:, 0].tolist() == names.entity_rows.tolist()
    for r in rows:
        kept = r[r >= 0].tolist()
        assert len(kept) == len(set(kept)) == 3  # top-k, each entity once


def _docs(nlp):
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=lab) for a, b, lab in SPANS]
    return [doc]


def _nlp(kb_dir, rules, top_k=3):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": top_k, "rules": rules})
    return nlp


def _candidates(nlp):
    return [[(e.kb_id_, e._.pel_candidates) for e in d.ents] for d in nlp.pipe(_docs(nlp))]


def test_rule_in_a_saved_pipeline(kb_dir, names_dir, tmp_path):
    rule = {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names_dir), "mode": "names"}
    nlp = _nlp(kb_dir, {"names": rule})
    before = _candidates(nlp)
    plain = _candidates(_nlp(kb_dir, {}))
    assert before != plain  # the rule changed something (name scores instead of entity rows)
    nlp.to_disk(tmp_path / "p")
    assert (tmp_path / "p" / "pel_linker" / NAMES_FOLDER / "embeddings.npy").exists()
    names_dir.rename(tmp_path / "moved")  # the saved copy is read, not the configured path
    again = spacy.load(tmp_path / "p")
    assert again.config["components"]["pel_linker"]["rules"]["names"]["mode"] == "names"
    assert _candidates(again) == before


def test_decided_mentions_are_left_alone(kb_dir, names_dir):
    aliases = {"@misc": "spacy_pel.rules.alias_table.v1"}
    rule = {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names_dir), "mode": "names"}
    without = _candidates(_nlp(kb_dir, {"aliases": aliases}))[0]
    with_rule = _candidates(_nlp(kb_dir, {"aliases": aliases, "names": rule}))[0]
    # Li2CO3 (a D1 synonym) and atrial-flutter (the D3 name) are decided: one candidate, score 1.0
    assert with_rule[:2] == without[:2] == [("D1", [["D1", "lithium carbonate", 1.0]]),
                                            ("D3", [["D3", "atrial flutter", 1.0]])]
    assert with_rule[2] != without[2]  # the open mention was re-ranked by its names


def test_a_name_index_of_another_encoder_or_kb_is_refused(kb_dir, names_dir, other_tiny_bert, tmp_path):
    names, index = NameIndex.from_disk(names_dir), EntityIndex.from_disk(kb_dir)
    other = BiEncoder.from_pretrained(str(other_tiny_bert))
    with pytest.raises(EncoderMismatchError, match="name index"):
        names.check(other, index.entities.ids)
    encoder = BiEncoder.from_pretrained(index.encoder_source)
    names.check(encoder, index.entities.ids)
    with pytest.raises(ValueError, match="another KB"):
        names.check(encoder, list(index.entities.ids)[::-1])


def test_resumed_build_reuses_its_own_chunks_only(kb_dir, tmp_path, caplog):
    index = EntityIndex.from_disk(kb_dir)
    encoder = BiEncoder.from_pretrained(index.encoder_source)
    work = tmp_path / "work"
    fresh, _ = NameIndex.build(index.entities, encoder, work=tmp_path / "fresh", chunk_size=3)
    # a finished chunk of another build (other input kind) must not be reused, even with the right shape
    NameIndex.build(index.entities, encoder, input="name_types", work=work, chunk_size=3)
    chunks = sorted(work.glob("chunk_*.npy"))
    assert len(chunks) == 3
    _, report = NameIndex.build(index.entities, encoder, work=work, chunk_size=3)
    assert report["reused_entities"] == 0 and "input" in report["restarted"]
    # an interrupted build (last chunk lost) resumes from its own chunks and gives the same vectors
    (work / "chunk_00002.npy").unlink()
    with caplog.at_level(logging.INFO, logger="spacy_pel"):
        again, report = NameIndex.build(index.entities, encoder, work=work, chunk_size=3)
    assert report["reused_entities"] == 6 and report["restarted"] is None
    assert f"resuming, 6 of {len(again)} names already encoded" in caplog.text  # names, not "entities"
    assert json.loads((work / STAMP_FILE).read_text())["input"] == "name"
    np.testing.assert_array_equal(again.searcher.matrix.float().numpy(), fresh.searcher.matrix.float().numpy())


def test_bad_settings_fail_when_the_rule_is_made(kb_dir):
    for bad in ({"mode": "min"}, {"weight": 2}, {"names": 3}):
        with pytest.raises(ValueError, match="name_rows"):
            _nlp(kb_dir, {"names": {"@misc": "spacy_pel.rules.name_rows.v1", **bad}})


def test_ids_digest_is_the_same_for_a_string_column_and_a_list():
    from spacy_pel.retrieval.names import ids_digest
    from spacy_pel.retrieval.table import StringColumn

    ids = ["D1", "Ünï", "", "C22"]
    assert ids_digest(StringColumn.of(ids)) == ids_digest(ids) != ids_digest(ids[::-1])
    assert ids_digest(StringColumn.of(["D1D2"])) != ids_digest(["D1", "D2"])  # separators count


def _sub_kb(tmp_path, tiny_encoder_dir, drop="D2"):
    lines = [line for line in KB_LINES if f'"id": "{drop}"' not in line]
    (tmp_path / "sub.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    build_kb(tmp_path / "sub.jsonl", tmp_path / "sub", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return tmp_path / "sub"


def test_for_kb_equals_a_build_for_the_smaller_kb(kb_dir, names_dir, tiny_encoder_dir, tmp_path):
    sub = _sub_kb(tmp_path, tiny_encoder_dir)
    names, full, small = NameIndex.from_disk(names_dir), EntityIndex.from_disk(kb_dir), EntityIndex.from_disk(sub)
    derived = names.for_kb(full.entities.ids, small.entities.ids)
    build_names(sub, progress=False)
    built = NameIndex.from_disk(sub / "names")
    assert derived.names == built.names and derived.entity_rows.tolist() == built.entity_rows.tolist()
    assert derived.ids_sha256 == built.ids_sha256 and derived.entities == built.entities == 4
    np.testing.assert_allclose(derived.searcher.matrix.float().numpy(), built.searcher.matrix.float().numpy(), atol=1e-2)
    encoder = BiEncoder.from_pretrained(small.encoder_source)
    derived.check(encoder, small.entities.ids)  # accepted for the smaller KB
    with pytest.raises(ValueError, match="old_ids"):
        names.for_kb(small.entities.ids, full.entities.ids)
    with pytest.raises(ValueError, match="not in the old one"):
        derived.for_kb(small.entities.ids, full.entities.ids)


def test_without_names_the_rule_is_off(kb_dir):
    plain = _candidates(_nlp(kb_dir, {}))
    assert _candidates(_nlp(kb_dir, {"names": {"@misc": "spacy_pel.rules.name_rows.v1"}})) == plain


def test_a_saved_copy_for_another_kb_gives_way_to_the_configured_names(kb_dir, names_dir, tiny_encoder_dir, tmp_path):
    rule = {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names_dir), "mode": "names"}
    nlp = _nlp(kb_dir, {"names": rule})
    _candidates(nlp)
    nlp.to_disk(tmp_path / "p")
    sub = _sub_kb(tmp_path, tiny_encoder_dir)
    with pytest.raises(ValueError, match="another KB"):  # the saved copy (full KB) does not fit the smaller KB
        _candidates(spacy.load(tmp_path / "p", config={"components.pel_linker.kb": str(sub)}))
    names_dir.rename(tmp_path / "gone")  # loaded elsewhere: the build-time path is not there (FileNotFoundError before)
    with pytest.raises(ValueError, match="own name rows do not fit.*set the rule's `names` to a name index of this KB"):
        _candidates(spacy.load(tmp_path / "p", config={"components.pel_linker.kb": str(sub)}))
    (tmp_path / "gone").rename(names_dir)
    derived = NameIndex.from_disk(names_dir).for_kb(EntityIndex.from_disk(kb_dir).entities.ids,
                                                    EntityIndex.from_disk(sub).entities.ids)
    derived.to_disk(tmp_path / "sub_names")
    again = spacy.load(tmp_path / "p", config={"components.pel_linker.kb": str(sub),
                                               "components.pel_linker.rules.names.names": str(tmp_path / "sub_names")})
    got = _candidates(again)[0]
    assert all(c[0] != "D2" for _, cands in got for c in cands)  # nothing of the removed record
    assert got == _candidates(_nlp(sub, {"names": {**rule, "names": str(tmp_path / "sub_names")}}))[0]


def test_the_rules_config_assembles_with_and_without_a_name_index(kb_dir, names_dir, tmp_path):
    """configs/linker_rules.cfg (the `all` pipeline): `paths.names` puts the name index in; null leaves the rule off."""
    from pathlib import Path

    config_path = Path(__file__).resolve().parent.parent / "configs" / "linker_rules.cfg"
    got = {}
    for names in (str(names_dir), None):
        config = spacy.util.load_config(config_path, overrides={"paths.kb": str(kb_dir), "paths.names": names})
        nlp = spacy.util.load_model_from_config(config, auto_fill=True)
        nlp.initialize()
        rule = nlp.get_pipe("pel_linker").rules["names"]
        assert (rule.names is not None) == (names is not None)
        assert (rule.mode, rule.weight, rule.search, rule.text_weight) == ("mean", 0.5, False, 0.33)
        assert names is None or (rule.names.file is not None and rule.names.searcher is None)  # vectors on disk
        got[names] = _candidates(nlp)
        nlp.to_disk(tmp_path / str(names is None))
        assert (tmp_path / str(names is None) / "pel_linker" / NAMES_FOLDER).exists() == (names is not None)
    assert got[str(names_dir)] != got[None]


def test_an_index_on_disk_scores_as_in_memory_but_does_not_search(names_dir, tmp_path):
    memory, disk = NameIndex.from_disk(names_dir), NameIndex.from_disk(names_dir, in_memory=False)
    assert disk.searcher is None and disk.file is not None
    rng = np.random.default_rng(2)
    queries = rng.normal(size=(3, memory.searcher.matrix.shape[1])).astype(np.float32)
    rows = np.array([[2, -1, 0], [4, 3, 1], [-1, -1, 1]])
    # float16 on disk vs bf16 in memory: the same scores to bf16's precision
    np.testing.assert_allclose(disk.best_name_scores(queries, rows), memory.best_name_scores(queries, rows), atol=0.05)
    with pytest.raises(ValueError, match="does not search"):
        disk.search(queries, 2)
    again = pickle.loads(pickle.dumps(disk.file))  # spawned processes get a file of their own, opened by path
    assert again.fd != disk.file.fd
    np.testing.assert_array_equal(again.rows(np.array([3, 0])), disk.file.rows(np.array([3, 0])))
    # the whole index too, names read lazily included (the original, and its descriptors, gone by then)
    index = NameIndex.from_disk(names_dir, in_memory=False)
    data = pickle.dumps(index)
    del index
    gc.collect()
    assert pickle.loads(data).names == memory.names
    disk.to_disk(tmp_path / "copy")  # the vectors file is copied as it is
    assert (tmp_path / "copy" / "embeddings.npy").read_bytes() == (names_dir / "embeddings.npy").read_bytes()
    assert NameIndex.from_disk(tmp_path / "copy").names == memory.names


@pytest.mark.parametrize("mode", ["max", "names", "mean"])
def test_without_search_the_retrieved_candidates_are_only_reordered(names_dir, kb_dir, mode):
    names, index = NameIndex.from_disk(names_dir, in_memory=False), EntityIndex.from_disk(kb_dir)
    rng = np.random.default_rng(3)
    queries = rng.normal(size=(4, index.embeddings.shape[1])).astype(np.float32)
    _, retrieved = index.search(queries, 3)
    scores, rows = merge_candidates(names, index.vectors, queries, retrieved, mode, 0.5, search=False)
    entity = np.einsum("ncd,nd->nc", np.asarray(index.embeddings[rows], np.float32), queries)
    best = names.best_name_scores(queries, rows)
    want = {"max": np.maximum(entity, best), "names": best, "mean": 0.5 * best + 0.5 * entity}[mode]
    for q in range(len(queries)):
        assert sorted(rows[q].tolist()) == sorted(retrieved[q].tolist())  # nothing added, nothing dropped
        assert list(scores[q]) == sorted(scores[q], reverse=True)
        np.testing.assert_allclose(scores[q], want[q], atol=1e-5)


def test_the_text_weight_mixes_in_the_mention_texts_own_name_similarity(names_dir, kb_dir):
    names, index = NameIndex.from_disk(names_dir, in_memory=False), EntityIndex.from_disk(kb_dir)
    n = len(names)
    texts = _vectors(NameIndex.from_disk(names_dir), range(n))  # each name's own vector as the mention text's
    rng = np.random.default_rng(4)
    queries = rng.normal(size=(n, texts.shape[1])).astype(np.float32)  # contexts pointing anywhere
    rows = np.tile(np.arange(5), (n, 1))  # every entity retrieved
    base_s, base_r = merge_candidates(names, index.vectors, queries, rows, "mean", 0.5, search=False)
    scores, got = merge_candidates(names, index.vectors, queries, rows, "mean", 0.5, search=False,
                                   texts=texts, text_weight=0.9)
    assert got[:, 0].tolist() == names.entity_rows.tolist()  # the entity whose name the text is comes first
    for q in range(n):
        text_best = names.best_name_scores(texts[[q]], got[[q]])[0]
        base = dict(zip(base_r[q].tolist(), base_s[q].tolist()))
        want = [0.1 * base[r] + 0.9 * t for r, t in zip(got[q].tolist(), text_best)]
        np.testing.assert_allclose(scores[q], want, atol=1e-5)
    with pytest.raises(ValueError, match="text_weight"):
        _nlp(kb_dir, {"names": {"@misc": "spacy_pel.rules.name_rows.v1", "text_weight": 1.5}})


def test_the_text_pass_encodes_each_distinct_text_once_and_gives_each_mention_its_own(kb_dir, names_dir, monkeypatch):
    from spacy_pel.pipeline.rules import name_rows
    from spacy_pel.retrieval import names

    vocab, encoded, merged = ["flutter", "Li2CO3", "warfarin"], [], []
    rule = {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names_dir), "mode": "mean", "search": False,
            "text_weight": 0.5}
    nlp = _nlp(kb_dir, {"names": rule})
    linker = nlp.get_pipe("pel_linker")
    linker.ensure_loaded()
    encoder = linker.encoder
    text_of = {tuple(s): t for t, s in zip(vocab, names.name_inputs(encoder, vocab, [""] * 3, "name", names.MAX_LENGTH))}

    def one_hot(tower, seqs, batch_size=256, progress=False, max_tokens=None):  # the tower's input → a vector that says which text it is
        encoded.append([text_of[tuple(s)] for s in seqs])
        return np.eye(len(vocab), 32, dtype=np.float32)[[vocab.index(t) for t in encoded[-1]]]

    def capture(*args, **kwargs):
        merged.append(args[7])  # the texts' vectors, one row per open mention
        return merge_candidates(*args, **kwargs)

    monkeypatch.setattr(names.PieceTower, "encode_entities", one_hot)
    monkeypatch.setattr(name_rows, "merge_candidates", capture)
    doc = nlp.make_doc("flutter , Li2CO3 and flutter again , then warfarin")
    doc.ents = [Span(doc, 0, 1, label="Disease"), Span(doc, 2, 3, label="Chemical"), Span(doc, 4, 5, label="Disease"),
                Span(doc, 8, 9, label="Chemical")]
    nlp(doc)
    assert [sorted(batch) for batch in encoded] == [sorted(vocab)]  # "flutter" encoded once
    assert [vocab[int(np.argmax(row))] for row in merged[0]] == ["flutter", "Li2CO3", "flutter", "warfarin"]


def test_a_pipeline_read_from_bytes_with_rows_on_disk_saves_again(kb_dir, names_dir, tmp_path):
    # search = false reads the rows from disk (configs/linker_rules.cfg); from_bytes removes the folder it
    # unpacked them to, and to_disk / to_bytes copied the vectors and names by path: FileNotFoundError
    rule = {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(names_dir), "search": False}
    nlp = _nlp(kb_dir, {"names": rule})
    before = _candidates(nlp)
    back = _nlp(kb_dir, {"names": rule}).from_bytes(nlp.to_bytes())
    assert _candidates(back) == before
    back.to_disk(tmp_path / "again")
    assert (tmp_path / "again" / "pel_linker" / NAMES_FOLDER / "names.json").exists()
    assert _candidates(spacy.load(tmp_path / "again")) == before
    assert _candidates(_nlp(kb_dir, {"names": rule}).from_bytes(back.to_bytes())) == before


@pytest.mark.parametrize("precision", ["bf16", "int8", "fp32"])
def test_an_index_held_in_memory_saves_its_vectors_as_read_not_as_searched(names_dir, tmp_path, precision):
    """Held in memory for search in bf16 (or the int8 screen's float16), the vectors were written back from that
    copy: a pipeline saved on a bf16 CPU rounded float16 name vectors to bf16 for good. The file read is copied."""
    original = np.load(names_dir / "embeddings.npy")
    changed = original.astype(np.float32) + np.float32(1e-3) * np.sign(original)  # far from bf16's grid
    np.save(names_dir / "embeddings.npy", changed.astype(np.float16), allow_pickle=False)
    index = NameIndex.from_disk(names_dir, precision)
    index.to_disk(tmp_path / "copy")
    assert (tmp_path / "copy" / "embeddings.npy").read_bytes() == (names_dir / "embeddings.npy").read_bytes()
