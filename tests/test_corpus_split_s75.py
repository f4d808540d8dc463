"""``split --kb``: the dev part's ``unseen`` is the count the dev report's unseen row (``evaluate --train``) is
measured on — alternative ids resolved, mentions of ids the KB lacks left out (``absent``); without the KB it
compares ids as written."""
import json

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, NIL, write_docbin
from spacy_pel.corpus_split import split_corpus, unseen_counts
from spacy_pel.retrieval.build import build_kb

from .conftest import KB_LINES

NLP = spacy.blank("en")
TRAIN_IDS = ["D1", "GONE"]
# OLD1: D1's alternative id (seen); GONE: not in the KB (absent); D2, D5: unseen; D3|GONE: seen through GONE
DEV_IDS = ["OLD1", "GONE", "D2", NIL, "D3|GONE", "D5"]


@pytest.fixture(scope="module")
def alt_kb(tmp_path_factory, tiny_encoder_dir):
    folder = tmp_path_factory.mktemp("alt_kb")
    lines = [json.loads(line) for line in KB_LINES]
    lines[0]["extra"] = {"alt_ids": ["OLD1"]}
    (folder / "kb.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf8")
    build_kb(folder / "kb.jsonl", folder / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return folder / "kb"


def doc_of(pmid, ids):
    doc = NLP.make_doc(" ".join(f"lithium{n} carbonate" for n in range(len(ids))))
    doc.spans[GOLD_KEY] = [Span(doc, 2 * n, 2 * n + 2, "Chemical", kb_id=i) for n, i in enumerate(ids)]
    doc.user_data["pmid"] = pmid
    return doc


def two_doc_corpus(path):
    write_docbin([doc_of("A", TRAIN_IDS), doc_of("B", DEV_IDS)], path)
    seed = next(s for s in range(50) if split_corpus(path, path.with_name("t.spacy"), path.with_name("d.spacy"), 0.5,
                                                       seed=s)["dev_doc_ids"] == ["B"])
    return seed


def test_split_with_kb_counts_unseen_as_the_dev_report_does(tmp_path, alt_kb):
    seed = two_doc_corpus(tmp_path / "all.spacy")
    train, dev = tmp_path / "train.spacy", tmp_path / "dev.spacy"
    result = CliRunner().invoke(app, ["split", str(tmp_path / "all.spacy"), str(train), str(dev), "--dev-share", "0.5",
                                      "--seed", str(seed), "--kb", str(alt_kb)])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)["dev"]
    report = tmp_path / "e.json"
    result = CliRunner().invoke(app, ["evaluate", str(dev), "--kb", str(alt_kb), "--train", str(train),
                                      "--output", str(report)])
    assert result.exit_code == 0, result.output
    evaluated = json.loads(report.read_text(encoding="utf8"))["counts"]
    assert (counts["unseen"], counts["absent"]) == (evaluated["unseen"], evaluated["absent"]) == (2, 1)


def test_split_without_kb_compares_ids_as_written(tmp_path):
    seed = two_doc_corpus(tmp_path / "all.spacy")
    counts = split_corpus(tmp_path / "all.spacy", tmp_path / "t.spacy", tmp_path / "d.spacy", 0.5, seed=seed)["dev"]
    assert counts["unseen"] == 3 and "absent" not in counts  # OLD1, D2, D5: no id of theirs in training
    assert unseen_counts([doc_of("A", TRAIN_IDS)], [doc_of("B", DEV_IDS)]) == {"unseen": 3}


def test_split_refuses_a_kb_that_is_no_kb_folder_in_one_line(tmp_path):
    seed = two_doc_corpus(tmp_path / "all.spacy")
    (tmp_path / "nokb").mkdir()
    for kb, fragment in ((tmp_path / "missing", "KB folder not found"), (tmp_path / "nokb", "not a spacy_pel KB folder")):
        result = CliRunner().invoke(app, ["split", str(tmp_path / "all.spacy"), str(tmp_path / "t2.spacy"),
                                          str(tmp_path / "d2.spacy"), "--seed", str(seed), "--kb", str(kb)])
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], result.stderr
        assert not (tmp_path / "t2.spacy").exists()
