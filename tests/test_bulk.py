"""Bulk linking on Ray Data (issue #15), in local mode (``ray.init(num_cpus=2)``) with the tiny BERT.

The acceptance tests: the bulk output equals ``nlp.pipe`` on the same documents row for row; a job
stopped after one shard and run again finishes with no duplicate and no missing document; a poisoned
document lands in the errors file while the others complete.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy

from spacy_pel.bulk.run import link_corpus
from spacy_pel.bulk.shards import find_shards, plan_chunks, read_chunk
from spacy_pel.corpora import pubtator_to_docs
from spacy_pel.files import InputError
from spacy_pel.pipeline.linker import configure_linker

ray = pytest.importorskip("ray")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

TERMS = [("lithium carbonate", "Chemical"), ("tricuspid regurgitation", "Disease"), ("atrial flutter", "Disease"),
         ("aspirin", "Chemical"), ("warfarin", "Chemical"), ("heart failure", "Disease")]
PATTERNS = [{"label": label, "pattern": term} for term, label in TERMS]


def sentence(i: int) -> tuple:
    """A title, an abstract and the mentions (start, end, text, type) of document ``i`` (title + " " + abstract)."""
    a, b, c = TERMS[i % 6], TERMS[(i + 2) % 6], TERMS[(i + 3) % 6]
    title = f"Case {i}: {a[0]} and {b[0]}"
    abstract = f"A patient on {c[0]} developed {a[0]} after {i} days."
    text = title + " " + abstract
    mentions = []
    for term, label in (a, b):
        start = title.index(term)
        mentions.append((start, start + len(term), term, label))
    for term, label in (c, a):
        start = len(title) + 1 + abstract.index(term)
        mentions.append((start, start + len(term), term, label))
    return title, abstract, text, sorted(mentions)


def write_pubtator(path: Path, ids) -> Path:
    lines = []
    for i in ids:
        title, abstract, _, mentions = sentence(i)
        lines += [f"{1000 + i}|t|{title}", f"{1000 + i}|a|{abstract}"]
        lines += [f"{1000 + i}\t{a}\t{b}\t{t}\t{label}\t-1" for a, b, t, label in mentions]
        lines.append("")
    path.write_text("\n".join(lines) + "\n", encoding="utf8")
    return path


@pytest.fixture(scope="module")
def local_ray():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


@pytest.fixture
def pipeline(kb_dir, tmp_path) -> Path:
    """A saved pipeline: an entity ruler (the NER for raw text) and pel_linker, with a NIL threshold
    between the tiny encoder's scores so that some mentions are NIL."""
    nlp = spacy.blank("en")
    nlp.add_pipe("entity_ruler").add_patterns(PATTERNS)
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 3})
    scores = sorted(e._.pel_candidates[0][2] for i in range(6) for e in nlp(sentence(i)[2]).ents)
    configure_linker(nlp, threshold=scores[len(scores) // 2])
    nlp.to_disk(tmp_path / "pipeline")
    return tmp_path / "pipeline"


def rows_of(docs, ids):
    """The rows the issue asks for, read straight off docs that nlp.pipe linked."""
    return [
        {"doc_id": doc_id, "start_char": e.start_char, "end_char": e.end_char, "text": e.text, "label": e.label_,
         "kb_id": e.kb_id_, "score": e._.pel_candidates[0][2] if e._.pel_candidates else None,
         "confidence": e._.pel_confidence,
         "candidates": [{"id": c[0], "name": c[1], "score": c[2]} for c in e._.pel_candidates]}
        for doc, doc_id in zip(docs, ids) for e in doc.ents
    ]


def expected_pubtator(pipeline: Path, path: Path, batch_size: int):
    nlp = spacy.load(pipeline)
    docs = list(pubtator_to_docs(nlp, path))
    return rows_of(nlp.pipe(docs, batch_size=batch_size, disable=["entity_ruler"]), [d.user_data["pmid"] for d in docs])


def read_rows(output: Path, shard: str):
    return pq.read_table(output / "mentions" / f"{shard}.parquet").to_pylist()


def assert_same_rows(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert {k: v for k, v in g.items() if k not in ("score", "confidence", "candidates")} == \
               {k: v for k, v in e.items() if k not in ("score", "confidence", "candidates")}
        assert g["confidence"] == pytest.approx(e["confidence"], abs=1e-4)  # the NIL strategy's, NIL below the threshold
        assert [c["id"] for c in g["candidates"]] == [c["id"] for c in e["candidates"]]
        assert g["score"] == pytest.approx(e["score"], abs=1e-4)
        assert [c["score"] for c in g["candidates"]] == pytest.approx([c["score"] for c in e["candidates"]], abs=1e-4)


def test_bulk_equals_nlp_pipe_row_for_row(local_ray, pipeline, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_pubtator(corpus / "a.txt", range(7))  # spans given
    records = [{"id": f"r{i}", "text": sentence(i)[2]} for i in range(5)] + [{"id": "empty", "text": ""}]
    (corpus / "b.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    pq.write_table(pa.Table.from_pylist(records[:3]), corpus / "c.parquet", row_group_size=2)
    summary = link_corpus(corpus, tmp_path / "out", pipeline, workers=2, batch_size=3, progress=False)

    assert_same_rows(read_rows(tmp_path / "out", "a.txt"), expected_pubtator(pipeline, corpus / "a.txt", 3))
    nlp = spacy.load(pipeline)  # raw text: the pipeline's own NER (the entity ruler) finds the mentions
    raw = rows_of(nlp.pipe([r["text"] for r in records], batch_size=3), [r["id"] for r in records])
    assert_same_rows(read_rows(tmp_path / "out", "b.jsonl"), raw)
    assert_same_rows(read_rows(tmp_path / "out", "c.parquet"), [r for r in raw if r["doc_id"] in ("r0", "r1", "r2")])
    assert pq.read_table(tmp_path / "out" / "mentions").num_rows == 28 + 20 + 12  # one Parquet dataset
    nil = sum(r["kb_id"] == "NIL" for r in pq.read_table(tmp_path / "out" / "mentions").to_pylist())
    assert 0 < nil < 60
    assert (summary["docs"], summary["mentions"], summary["nil"], summary["errors"]) == (16, 60, nil, 0)
    assert summary["this_run"]["mentions_per_s"] > 0 and summary["shards_linked_now"] == 3
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["mentions"] == 60
    assert not (tmp_path / "out" / "errors").exists()


class Stop(Exception):
    pass


def stop_after_first(marker):
    raise Stop(marker["shard"])


def test_stopped_after_one_shard_resumes_without_duplicate_or_missing_document(local_ray, pipeline, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n, name in enumerate(("a", "b", "c")):
        write_pubtator(corpus / f"{name}.txt", range(4 * n, 4 * n + 4))
    out = tmp_path / "out"
    with pytest.raises(Stop):  # the driver dies right after the first shard's marker is written
        link_corpus(corpus, out, pipeline, workers=1, batch_size=2, progress=False, on_shard=stop_after_first)
    assert len(list((out / "done").glob("*.json"))) == 1
    (out / "mentions").mkdir(exist_ok=True)
    unfinished = sorted({"a.txt", "b.txt", "c.txt"} - {p.stem for p in (out / "done").glob("*.json")})
    (out / "mentions" / f"{unfinished[0]}.parquet").write_bytes(b"half a file")  # killed mid-write, no marker

    from typer.testing import CliRunner

    from spacy_pel.cli import app

    result = CliRunner().invoke(app, ["bulk", str(corpus), str(out), "--pipeline", str(pipeline), "--workers", "1",
                                      "--batch-size", "2", "--no-progress"])  # the re-run, from the command line
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{"):])
    assert (summary["shards_skipped"], summary["shards_linked_now"], summary["docs"]) == (1, 2, 12)
    for name in ("a", "b", "c"):
        got = read_rows(out, f"{name}.txt")
        assert_same_rows(got, expected_pubtator(pipeline, corpus / f"{name}.txt", 2))
    ids = [r["doc_id"] for r in pq.read_table(out / "mentions").to_pylist()]
    assert sorted(set(ids)) == [str(1000 + i) for i in range(12)] and len(ids) == 12 * 4
    assert link_corpus(corpus, out, pipeline, workers=1, progress=False)["shards_skipped"] == 3  # nothing left

    copy = tmp_path / "elsewhere" / "pipeline"
    shutil.copytree(pipeline, copy)  # the same pipeline, moved: its shards stay finished
    assert link_corpus(corpus, out, copy, workers=1, progress=False)["shards_skipped"] == 3
    other = tmp_path / "retrained"
    nlp = spacy.load(pipeline)
    configure_linker(nlp, threshold=0.0)
    nlp.to_disk(other)
    written = {p.name: p.read_bytes() for p in (out / "mentions").iterdir()}
    result = CliRunner().invoke(app, ["bulk", str(corpus), str(out), "--pipeline", str(other), "--no-progress"])
    assert result.exit_code == 2, result.output  # refused: its links would mix with the first pipeline's
    assert "3 finished shard(s) there were linked by another pipeline" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert {p.name: p.read_bytes() for p in (out / "mentions").iterdir()} == written


def poison(nlp):
    """Actor setup: the linker raises on any batch holding a document that mentions 'POISON'."""
    from spacy_pel.pipeline.linker import find_linker

    linker = find_linker(nlp)[1]
    predict = linker.predict

    def poisoned(docs, *args, **kwargs):
        if any("POISON" in doc.text for doc in docs):
            raise RuntimeError("poisoned document")
        return predict(docs, *args, **kwargs)

    linker.predict = poisoned


def test_poisoned_and_malformed_documents_go_to_the_errors_file(local_ray, pipeline, tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the actors need not import this test module
    lines = [json.dumps({"id": f"r{i}", "text": sentence(i)[2]}) for i in range(6)]
    lines[2] = json.dumps({"id": "bad", "text": "POISON: " + sentence(2)[2]})
    lines.insert(4, "{not json")
    lines.insert(5, json.dumps({"text": "no id here"}))
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    summary = link_corpus(tmp_path / "in.jsonl", tmp_path / "out", pipeline, workers=1, batch_size=4,
                          progress=False, setup=poison)
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors" / "in.jsonl.jsonl").read_text().splitlines()]
    where = str(tmp_path / "in.jsonl")
    assert [e["doc_id"] for e in errors] == ["bad", f"{where}:5", f"{where}:6"]
    assert "RuntimeError: poisoned document" in errors[0]["reason"] and "failed 2 times" in errors[0]["reason"]
    assert errors[1]["reason"].startswith(f"{where}:5: not a JSON line") and errors[2]["reason"] == f"{where}:6: no id"
    nlp = spacy.load(pipeline)
    good = [i for i in range(6) if i != 2]
    assert_same_rows(read_rows(tmp_path / "out", "in.jsonl"),
                     rows_of([nlp(sentence(i)[2]) for i in good], [f"r{i}" for i in good]))
    assert (summary["docs"], summary["errors"], summary["mentions"]) == (8, 3, 20)


def test_raw_text_needs_a_pipeline_that_finds_mentions(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "no_ner")
    (tmp_path / "in.jsonl").write_text('{"id": "1", "text": "aspirin"}\n', encoding="utf8")
    with pytest.raises(InputError, match="cannot find mentions in it: it has no NER"):
        link_corpus(tmp_path / "in.jsonl", tmp_path / "out", tmp_path / "no_ner", progress=False)
    assert not (tmp_path / "out").exists()  # refused before Ray started or anything was written


def test_chunks_cover_every_document_once(tmp_path):
    path = write_pubtator(tmp_path / "x.pubtator", range(7))
    (shard,) = find_shards(path)
    chunks = plan_chunks(shard, 3)
    assert [(c.first_seq, c.count) for c in chunks] == [(0, 3), (3, 3), (6, 1)]
    items = [item for c in chunks for item in read_chunk(c.as_item())]
    assert [i["doc_id"] for i in items] == [str(1000 + i) for i in range(7)] and not any(i["error"] for i in items)
    assert [i["seq"] for i in items] == list(range(7))
    assert json.loads(items[1]["spans"]) == [[a, b, label] for a, b, _, label in sentence(1)[3]]
    lines = path.read_text().splitlines()
    lines[lines.index("1004|a|" + sentence(4)[1]) + 1] = "1004\t0\t3\tnot\tX\t-1"  # offsets give other text
    path.write_text("\n".join(lines) + "\n")
    items = [item for c in plan_chunks(shard, 3) for item in read_chunk(c.as_item())]
    bad = [i for i in items if i["error"]]
    assert [i["doc_id"] for i in bad] == ["1004"] and bad[0]["error"].startswith(f"{path}:{lines.index('1004|a|' + sentence(4)[1]) + 2}:")


def test_cli_errors_and_the_package_without_ray(pipeline, tmp_path):
    """… and a fresh process (spaCy's factories not yet registered) sees the entity ruler as the NER."""
    from typer.testing import CliRunner

    from spacy_pel.cli import app

    missing = CliRunner().invoke(app, ["bulk", str(tmp_path / "nothing"), str(tmp_path / "out"), "--pipeline", str(pipeline)])
    assert missing.exit_code == 2 and "input not found" in missing.output
    (tmp_path / "notes.md").write_text("x")
    wrong = CliRunner().invoke(app, ["bulk", str(tmp_path / "notes.md"), str(tmp_path / "out"), "--pipeline", str(pipeline)])
    assert wrong.exit_code == 2 and "not a shard" in wrong.output
    (tmp_path / "in.jsonl").write_text('{"id": "1", "text": "aspirin"}\n', encoding="utf8")
    code = ("import sys; sys.modules['ray'] = None; import spacy_pel, spacy_pel.cli; from spacy_pel.bulk import run, shards; "
            f"run.check_pipeline(run.Path({str(pipeline)!r}), shards.find_shards({str(tmp_path / 'in.jsonl')!r})); print('ok')")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "ok"


def crash(nlp):
    """Actor setup: the worker process dies (as on a segfault or the OOM killer) on a document with 'CRASH'."""
    import os

    from spacy_pel.pipeline.linker import find_linker

    linker = find_linker(nlp)[1]
    predict = linker.predict

    def crashing(docs, *args, **kwargs):
        if any("CRASH" in doc.text for doc in docs):
            os._exit(1)
        return predict(docs, *args, **kwargs)

    linker.predict = crashing


@pytest.mark.slow  # the worker is restarted twice (each restart reloads the pipeline)
def test_a_worker_that_dies_on_a_document_loses_only_that_document(local_ray, pipeline, tmp_path):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    records = [{"id": f"r{i}", "text": sentence(i)[2]} for i in range(6)]
    records[4]["text"] = "CRASH " + records[4]["text"]
    (tmp_path / "in.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf8")
    summary = link_corpus(tmp_path / "in.jsonl", tmp_path / "out", pipeline, workers=1, batch_size=2,
                          progress=False, setup=crash)
    errors = [json.loads(x) for x in (tmp_path / "out" / "errors" / "in.jsonl.jsonl").read_text().splitlines()]
    assert [e["doc_id"] for e in errors] == ["r4"] and errors[0]["reason"].startswith("lost:")
    assert sorted({r["doc_id"] for r in read_rows(tmp_path / "out", "in.jsonl")}) == ["r0", "r1", "r2", "r3", "r5"]
    assert (summary["docs"], summary["errors"]) == (6, 1)


def test_given_mentions_that_cannot_be_spans_are_counted_in_the_summary(local_ray, pipeline, tmp_path):
    """A given mention whose boundary falls inside white space is counted (with an example) per shard and in
    the summary, as ``link`` counts it (per document, so a batch linked again cannot count it twice), and a
    re-run that skips the finished shards still reports it."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    write_pubtator(corpus / "a.txt", range(3))
    (corpus / "b.txt").write_text("71|t|Lithium carbonate  and flutter.\n71|a|Aspirin.\n"
                                  "71\t0\t18\tLithium carbonate \tChemical\tD1\n71\t32\t39\tAspirin\tChemical\tD4\n\n"
                                  "72|t|Aspirin  and warfarin.\n72|a|None.\n72\t0\t8\tAspirin \tChemical\tD4\n",
                                  encoding="utf8")
    summary = link_corpus(corpus, tmp_path / "out", pipeline, workers=1, batch_size=4, progress=False)
    marker = json.loads((tmp_path / "out" / "done" / "b.txt.json").read_text())
    assert (summary["unaligned"], summary["overlapping_not_linked"], summary["mentions"]) == (2, 0, 12 + 1)
    assert marker["unaligned"] == 2 and [x[:8] for x in marker["unaligned_examples"]] == ["71 0-18 ", "72 0-8 '"]
    assert json.loads((tmp_path / "out" / "done" / "a.txt.json").read_text())["unaligned"] == 0
    again = link_corpus(corpus, tmp_path / "out", pipeline, workers=1, batch_size=4, progress=False)
    assert again["shards_linked_now"] == 0 and (again["unaligned"], again["unaligned_examples"]) == (2, marker["unaligned_examples"])
