"""``python -m spacy_pel split`` (spacy_pel.corpus_split): one corpus split by document into training and
dev parts — disjoint, complete, in the corpus's order, the same for a seed, gold ids kept."""
import json

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, NIL, gold_spans, read_docbin, write_docbin
from spacy_pel.corpus_split import split_corpus, split_docs
from spacy_pel.files import InputError


def corpus(path, n=20):
    """Doc i mentions entity E{i % 7} (and doc 3 a NIL mention), PMID 100 + i."""
    nlp, docs = spacy.blank("en"), []
    for i in range(n):
        doc = nlp.make_doc(f"Patient {i} took drug{i % 7} and had no fever.")
        spans = [Span(doc, 3, 4, label="Chemical", kb_id=f"E{i % 7}")]
        if i == 3:
            spans.append(Span(doc, 8, 9, label="Disease", kb_id=NIL))
        doc.spans[GOLD_KEY] = spans
        doc.user_data["pmid"] = str(100 + i)
        docs.append(doc)
    write_docbin(docs, path)
    return path


def test_split_is_by_document_disjoint_complete_and_seeded():
    train, dev = split_docs(20, 0.25, seed=0)
    assert len(dev) == 5 and sorted(train + dev) == list(range(20)) and not set(train) & set(dev)
    assert train == sorted(train) and dev == sorted(dev)
    assert split_docs(20, 0.25, seed=0) == (train, dev)
    assert split_docs(20, 0.25, seed=1) != (train, dev)
    assert dev != list(range(15, 20))  # drawn, not the corpus's tail
    assert len(split_docs(3, 0.01)[1]) == 1 and len(split_docs(3, 0.99)[0]) == 1  # both parts keep a document
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(InputError, match="between 0 and 1"):
            split_docs(20, bad)
    with pytest.raises(InputError, match="cannot be split"):
        split_docs(1, 0.5)


def test_split_corpus_writes_both_parts_with_their_gold(tmp_path):
    source = corpus(tmp_path / "all.spacy")
    counts = split_corpus(source, tmp_path / "train.spacy", tmp_path / "dev.spacy", 0.25, seed=3)
    nlp = spacy.blank("en")
    train, dev = read_docbin(nlp, tmp_path / "train.spacy"), read_docbin(nlp, tmp_path / "dev.spacy")
    pmids = [d.user_data["pmid"] for d in train + dev]
    assert sorted(pmids, key=int) == [str(100 + i) for i in range(20)] and len(dev) == 5
    assert counts["dev_doc_ids"] == [d.user_data["pmid"] for d in dev]
    for doc in train + dev:  # each doc's gold travels with it
        i = int(doc.user_data["pmid"]) - 100
        assert [s.kb_id_ for s in gold_spans(doc)][0] == f"E{i % 7}"
    assert counts["train"]["docs"] == 15 and counts["dev"]["docs"] == 5
    assert counts["train"]["mentions"] + counts["dev"]["mentions"] == 21
    assert counts["train"]["nil"] + counts["dev"]["nil"] == 1
    seen = {s.kb_id_ for d in train for s in gold_spans(d)}
    assert counts["dev"]["unseen"] == sum(s.kb_id_ not in seen and s.kb_id_ != NIL for d in dev for s in gold_spans(d))
    with pytest.raises(InputError, match="three different files"):
        split_corpus(source, tmp_path / "train.spacy", source, 0.25)


def test_split_command_prints_counts_and_refuses_bad_options_in_one_line(tmp_path):
    source = corpus(tmp_path / "all.spacy")
    result = CliRunner().invoke(app, ["split", str(source), str(tmp_path / "t.spacy"), str(tmp_path / "d.spacy"),
                                      "--dev-share", "0.5"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["dev"]["docs"] == 10
    pubtator = tmp_path / "corpus.txt"
    pubtator.write_text("1|t|Fever.\n\n", encoding="utf8")
    result = CliRunner().invoke(app, ["split", str(pubtator), str(tmp_path / "t.spacy"), str(tmp_path / "d.spacy")])
    assert result.exit_code == 2 and "convert it first" in result.stderr
    for args, fragment in ((["--dev-share", "2"], "between 0 and 1"), ([], None)):
        out = tmp_path / "d.txt" if fragment is None else tmp_path / "d.spacy"
        result = CliRunner().invoke(app, ["split", str(source), str(tmp_path / "t.spacy"), str(out), *args])
        assert result.exit_code == 2 and result.stderr.strip().startswith("error: ")
        assert fragment or ".spacy file" in result.stderr
        assert fragment is None or fragment in result.stderr


def one_line_error(result, *fragments):
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


def test_an_output_that_is_a_folder_is_refused_before_anything_is_written(tmp_path):
    source = corpus(tmp_path / "all.spacy")
    train = tmp_path / "train.spacy"
    train.write_bytes(b"an earlier training part")
    folder = tmp_path / "dev.spacy"
    folder.mkdir()
    for outputs in ((train, folder), (folder, tmp_path / "d2.spacy")):
        message = one_line_error(CliRunner().invoke(app, ["split", str(source), *map(str, outputs)]), str(folder), "folder")
        assert ".tmp-" not in message
        with pytest.raises(InputError, match=f"{folder}: it is a folder"):
            split_corpus(source, *outputs, 0.25)
    assert train.read_bytes() == b"an earlier training part" and not (tmp_path / "d2.spacy").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.spacy", "dev.spacy", "train.spacy"]  # no temp file left


def test_a_failed_dev_part_leaves_the_training_part_as_it_was(tmp_path, monkeypatch):
    import spacy_pel.corpus_split as corpus_split

    source = corpus(tmp_path / "all.spacy")
    train, dev = tmp_path / "train.spacy", tmp_path / "dev.spacy"
    train.write_bytes(b"old train")
    dev.write_bytes(b"old dev")
    real = corpus_split.write_docbin

    def full_disk(docs, path):
        if path == dev:
            raise OSError(28, "No space left on device", str(path))
        return real(docs, path)

    monkeypatch.setattr(corpus_split, "write_docbin", full_disk)
    with pytest.raises(OSError):
        split_corpus(source, train, dev, 0.25)
    assert train.read_bytes() == b"old train" and dev.read_bytes() == b"old dev"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["all.spacy", "dev.spacy", "train.spacy"]


def test_a_negative_seed_is_one_line(tmp_path):
    source = corpus(tmp_path / "all.spacy")
    result = CliRunner().invoke(app, ["split", str(source), str(tmp_path / "t.spacy"), str(tmp_path / "d.spacy"),
                                      "--seed", "-1"])
    one_line_error(result, "--seed", "-1")
    assert not (tmp_path / "t.spacy").exists()
    with pytest.raises(InputError, match="seed -1"):
        split_docs(20, 0.25, seed=-1)
    with pytest.raises(InputError, match="seed -1"):
        split_corpus(source, tmp_path / "t.spacy", tmp_path / "d.spacy", 0.25, seed=-1)
