"""``bulk``'s output folder mirrors one input, linked by one pipeline (session 69's probe, bugs 02–07).

Most tests run the driver (:func:`link_corpus`) with Ray's dataset replaced by :class:`InProcess`, which
reads each chunk with ``read_chunk`` and links it with the real :class:`LinkWorker` in this process (the
actor's work, without Ray's start-up); a refusal is checked with :func:`no_ray`, so that a run that is not
refused fails at once instead of linking. One test runs on a local Ray.
"""
import json
import logging

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.bulk import run
from spacy_pel.bulk.run import link_corpus
from spacy_pel.bulk.shards import find_shards, plan_chunks, read_chunk
from spacy_pel.bulk.worker import LinkWorker
from spacy_pel.cli import app
from spacy_pel.files import InputError

from .conftest import KB_LINES
from .test_bulk import PATTERNS, local_ray, write_pubtator  # noqa: F401 (fixture)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("ray")

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")
RAW_PUBTATOR = "31|t|lithium carbonate toxicity.\n31|a|aspirin and warfarin were given.\n\n32|t|atrial flutter.\n32|a|None.\n\n"


@pytest.fixture(scope="module")
def pipelines(tmp_path_factory, tiny_encoder_dir):
    """Saved pipelines: ``ner`` (an entity ruler and pel_linker), ``other`` (the same linker, another top_k:
    another pipeline by its digest) and ``no_ner`` (pel_linker alone: it cannot find mentions in raw text)."""
    from spacy_pel.retrieval.build import build_kb

    root = tmp_path_factory.mktemp("s69")
    (root / "kb.jsonl").write_text("\n".join(KB_LINES) + "\n", encoding="utf8")
    build_kb(root / "kb.jsonl", root / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    for name, ruler, top_k in (("ner", True, 3), ("other", True, 2), ("no_ner", False, 3)):
        nlp = spacy.blank("en")
        if ruler:
            nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
        nlp.add_pipe("pel_linker", config={"kb": str(root / "kb"), "top_k": top_k})
        nlp.to_disk(root / name)
    return {name: root / name for name in ("ner", "other", "no_ner")}


class InProcess:
    """Stands for ``run._dataset``'s Ray dataset: the chunks read and linked here, one chunk a batch."""

    def __init__(self, chunks, pipeline, workers, cpus_per_worker, batch_size, setup, alone=False):
        self.chunks, self.pipeline, self.batch_size, self.setup = chunks, pipeline, batch_size, setup

    def iter_batches(self, **kwargs):
        worker = LinkWorker(str(self.pipeline), 1, self.batch_size, self.setup)  # as an actor: after the planning
        for chunk in self.chunks:
            yield pa.Table.from_pydict(worker(pa.Table.from_pylist(list(read_chunk(chunk.as_item())))))


@pytest.fixture
def in_process(monkeypatch):
    monkeypatch.setattr(run, "connect", lambda address, num_cpus: False)
    monkeypatch.setattr(run, "_dataset", InProcess)


def ray_started(address, num_cpus):
    raise AssertionError("the run was not refused: it started linking")


@pytest.fixture
def no_ray(monkeypatch):
    monkeypatch.setattr(run, "connect", ray_started)


def link(input, output, pipeline, **kwargs):
    return link_corpus(input, output, pipeline, workers=1, batch_size=4, progress=False, **kwargs)


def jsonl(path, *records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in records), encoding="utf8")
    return path


def snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def bulk_cli(*args):
    return CliRunner().invoke(app, ["bulk", *map(str, args), "--workers", "1", "--no-progress"])


# ---------------------------------------------------------------- bug02: another pipeline, another input
def test_another_pipeline_is_refused_while_output_holds_a_shard_of_another_input(pipelines, tmp_path, in_process, monkeypatch):
    jsonl(tmp_path / "in1" / "a.jsonl", ("a1", "lithium carbonate and atrial flutter."))
    jsonl(tmp_path / "in2" / "b.jsonl", ("b1", "aspirin and warfarin were given."))
    out = tmp_path / "out"
    link(tmp_path / "in1", out, pipelines["ner"])
    before = snapshot(out)
    monkeypatch.setattr(run, "connect", ray_started)
    with pytest.raises(InputError, match=r"1 finished shard\(s\) there were linked by another pipeline"):
        link(tmp_path / "in2", out, pipelines["other"])
    result = bulk_cli(tmp_path / "in2", out, "--pipeline", pipelines["other"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert "linked by another pipeline" in result.output
    assert snapshot(out) == before  # nothing written, nothing overwritten


# ---------------------------------------------------------------- bug03: shards no longer in the input
def test_shards_no_longer_in_the_input_are_refused_or_set_aside(pipelines, tmp_path, in_process, caplog):
    corpus, out = tmp_path / "in", tmp_path / "out"
    jsonl(corpus / "p.jsonl", ("p1", "aspirin and warfarin."))
    jsonl(corpus / "q.jsonl", ("q1", "atrial flutter."))
    first = link(corpus, out, pipelines["ner"])
    assert first["docs"] == 2
    (corpus / "q.jsonl").rename(tmp_path / "q.jsonl")  # removed from the corpus
    before = snapshot(out)
    with pytest.raises(InputError, match=r"holds 1 shard\(s\) that are not in .*\(q\.jsonl: .*--set-aside-stale"):
        link(corpus, out, pipelines["ner"])
    result = bulk_cli(corpus, out, "--pipeline", pipelines["ner"])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1, result.output
    assert snapshot(out) == before

    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        summary = link(corpus, out, pipelines["ner"], set_aside_stale=True)
    (aside,) = (out / "stale").iterdir()
    assert summary["set_aside"] == {"shards": ["q.jsonl"], "folder": str(aside)} and "set aside" in caplog.text
    assert sorted(p.relative_to(aside).as_posix() for p in aside.rglob("*") if p.is_file()) == \
        ["done/q.jsonl.json", "mentions/q.jsonl.parquet"]
    rows = pq.read_table(out / "mentions").to_pylist()  # the documented way to read the output
    assert {r["doc_id"] for r in rows} == {"p1"} and len(rows) == summary["mentions"] and summary["docs"] == 1
    assert {r["doc_id"] for r in pq.read_table(aside / "mentions").to_pylist()} == {"q1"}  # kept, readable
    assert link(corpus, out, pipelines["ner"])["set_aside"] == {"shards": [], "folder": None}  # nothing stale now


# ---------------------------------------------------------------- bug04: an input that grows while linked
def test_a_shard_that_grows_while_it_is_linked_is_linked_again(pipelines, tmp_path, in_process, caplog):
    shard = jsonl(tmp_path / "in" / "g.jsonl", ("g1", "aspirin."))

    def producer_appends(nlp, path=str(shard)):  # runs when the worker starts: after the driver planned the shard
        with open(path, "a") as f:
            f.write('{"id": "g2", "text": "warfarin and atrial flutter."}\n')

    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        first = link(tmp_path / "in", tmp_path / "out", pipelines["ner"], setup=producer_appends)
    marker = json.loads((tmp_path / "out" / "done" / "g.jsonl.json").read_text())
    assert marker["input"]["size"] == len('{"id": "g1", "text": "aspirin."}\n')  # the file as planned
    again = link(tmp_path / "in", tmp_path / "out", pipelines["ner"])
    assert again["shards_linked_now"] == 1 and again["docs"] == 2
    assert {r["doc_id"] for r in pq.read_table(tmp_path / "out" / "mentions").to_pylist()} == {"g1", "g2"}
    assert first["docs"] == 1 and "g.jsonl changed while it was linked" in caplog.text
    assert link(tmp_path / "in", tmp_path / "out", pipelines["ner"])["shards_skipped"] == 1


# ---------------------------------------------------------------- bug05: shard names that collide
def test_shard_names_that_would_collide_are_refused(pipelines, tmp_path, no_ray):
    corpus = tmp_path / "in"
    jsonl(corpus / "x" / "y.jsonl", ("n1", "Aspirin."), ("n2", "Warfarin."))
    jsonl(corpus / "x__y.jsonl", ("m1", "Atrial flutter."))
    with pytest.raises(InputError, match=r"x/y\.jsonl and .*x__y\.jsonl would write the same output files"):
        find_shards(corpus)
    with pytest.raises(InputError, match="rename one of them"):
        link(corpus, tmp_path / "out", pipelines["ner"])
    assert not (tmp_path / "out").exists()
    (corpus / "x__y.jsonl").unlink()
    jsonl(corpus / "A.jsonl", ("a1", "Aspirin."))
    jsonl(corpus / "a.jsonl", ("a2", "Aspirin."))  # one file on a disk that ignores case
    with pytest.raises(InputError, match="would write the same output files"):
        find_shards(corpus)
    (corpus / "A.jsonl").unlink()
    assert [s.name for s in find_shards(corpus)] == ["a.jsonl", "x__y.jsonl"]


# ---------------------------------------------------------------- bug06: PubTator without annotations
def test_a_pubtator_shard_without_annotations_is_raw_text(pipelines, tmp_path, monkeypatch):
    raw = tmp_path / "in" / "abs.pubtator"
    raw.parent.mkdir()
    raw.write_text(RAW_PUBTATOR, encoding="utf8")
    (shard,) = find_shards(raw)
    items = [item for chunk in plan_chunks(shard, 1) for item in read_chunk(chunk.as_item())]
    assert [(i["doc_id"], i["spans"], i["error"]) for i in items] == [("31", "", ""), ("32", "", "")]  # raw text
    given = write_pubtator(tmp_path / "given.pubtator", range(2))
    (given_shard,) = find_shards(given)
    assert all(json.loads(i["spans"]) for c in plan_chunks(given_shard, 1) for i in read_chunk(c.as_item()))

    monkeypatch.setattr(run, "connect", ray_started)  # the mention-source check refuses before linking
    with pytest.raises(InputError, match="abs.pubtator is raw text .* cannot find mentions in it"):
        link(raw.parent, tmp_path / "out", pipelines["no_ner"])
    assert not (tmp_path / "out").exists()

    monkeypatch.setattr(run, "connect", lambda address, num_cpus: False)
    monkeypatch.setattr(run, "_dataset", InProcess)
    summary = link(raw.parent, tmp_path / "out", pipelines["ner"])
    rows = pq.read_table(tmp_path / "out" / "mentions").to_pylist()
    nlp = spacy.load(pipelines["ner"])  # the entity ruler finds the mentions, as link does with this file
    texts = {"31": "lithium carbonate toxicity. aspirin and warfarin were given.", "32": "atrial flutter. None."}
    expected = [(i, e.start_char, e.end_char, e.label_, e.kb_id_) for i, t in texts.items() for e in nlp(t).ents]
    assert [(r["doc_id"], r["start_char"], r["end_char"], r["label"], r["kb_id"]) for r in rows] == expected
    assert summary["mentions"] == len(expected) == 4


# ---------------------------------------------------------------- bug07: .json is BioC JSON, no shard
def test_json_is_no_shard(pipelines, tmp_path, caplog):
    bioc = tmp_path / "corpus" / "linked.json"
    bioc.parent.mkdir()
    bioc.write_text(json.dumps({"source": "x", "documents": [{"id": "11", "passages": []}]}, indent=1), encoding="utf8")
    with pytest.raises(InputError, match=r"linked\.json: not a shard .*BioC \.json / \.xml files: link them with `link`"):
        find_shards(bioc)
    with pytest.raises(InputError, match="no shard in this folder"):
        find_shards(bioc.parent)
    jsonl(bioc.parent / "b.jsonl", ("b1", "Aspirin."))
    with caplog.at_level(logging.WARNING, logger="spacy_pel"):
        assert [(s.name, s.format) for s in find_shards(bioc.parent)] == [("b.jsonl", "jsonl")]
    assert "1 file(s) left out, not shards (linked.json)" in caplog.text
    result = bulk_cli(bioc, tmp_path / "out", "--pipeline", pipelines["ner"])
    assert result.exit_code == 2 and "not a shard" in result.output and len(result.output.strip().splitlines()) == 1


# ---------------------------------------------------------------- on Ray: a raw PubTator shard beside a given one
def test_on_ray_a_pubtator_shard_without_annotations_is_linked_as_raw_text(local_ray, pipelines, tmp_path):  # noqa: F811
    corpus = tmp_path / "in"
    corpus.mkdir()
    (corpus / "abs.pubtator").write_text(RAW_PUBTATOR, encoding="utf8")
    write_pubtator(corpus / "given.txt", range(2))
    summary = link(corpus, tmp_path / "out", pipelines["ner"])
    raw = pq.read_table(tmp_path / "out" / "mentions" / "abs.pubtator.parquet").to_pylist()
    assert [r["text"] for r in raw] == ["lithium carbonate", "aspirin", "warfarin", "atrial flutter"]
    assert pq.read_table(tmp_path / "out" / "mentions").num_rows == summary["mentions"] == 4 + 8
