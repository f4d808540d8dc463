import json
import os

import numpy as np
import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.evaluate import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.evaluation.linking import evaluate, markdown, mention_table
from spacy_pel.evaluation.metrics import average_precision
from spacy_pel.pipeline.depth import deepen
from spacy_pel.pipeline.linker import Linked


def gold_doc(nlp, spans):
    doc = nlp.make_doc("Lithium carbonate toxicity caused tricuspid regurgitation and atrial flutter in a newborn")
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=k) for a, b, k in spans]
    doc.ents = list(doc.spans[GOLD_KEY])
    return doc


def test_average_precision():
    assert average_precision(np.array([1, 0, 1]), np.array([0.9, 0.8, 0.1])) == pytest.approx((1 + 2 / 3) / 2)
    assert average_precision(np.array([1, 1, 0]), np.array([0.9, 0.8, 0.1])) == 1.0


def test_groups_and_recall(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    docs = [gold_doc(nlp, [(0, 2, "D1"), (4, 6, "D2|D9"), (7, 9, "NIL"), (11, 12, "GONE")])]
    report = evaluate(linker, docs, train_ids={"D1"}, threshold=-1.0)
    assert report["counts"] == {"in_kb": 2, "absent": 1, "nil": 1, "seen": 1, "unseen": 1}
    assert report["recall_in_kb"]["R@64"] == 1.0  # 5 entities: every gold id is in the top 64
    assert report["recall_all_linkable"]["R@64"] == pytest.approx(2 / 3, abs=1e-3)
    assert report["nil"]["r"] == 0.0  # threshold -1: nothing is NIL
    strict = evaluate(linker, docs, threshold=2.0)
    assert strict["nil"]["r"] == 1.0 and strict["nil"]["p"] == 0.25
    # the component's own annotations are untouched by evaluation
    assert [e.kb_id_ for e in docs[0].ents] == ["D1", "D2|D9", "NIL", "GONE"]

    write_docbin(docs, tmp_path / "gold.spacy")
    out = tmp_path / "m.json"
    # --kb with --train: the linker's KB is read before the training corpus's ids are mapped through it
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--kb", str(kb_dir), "--output", str(out),
                                      "--train", str(tmp_path / "gold.spacy")])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["counts"] == {"in_kb": 2, "absent": 1, "nil": 1, "seen": 2, "unseen": 0}
    assert "R@64" in result.output
    assert "gold id absent from KB 1, NIL 1) — ids the KB lacks may be from an older KB release: `convert --id-map`" in result.output
    assert "--id-map" not in markdown({**report, "counts": {**report["counts"], "absent": 0}})  # nothing absent: no hint


@spacy.registry.misc("test.reverse_candidates.v1")
def reverse_candidates():
    """A rule whose first candidate depends on how many it is given: it reverses each open mention's list."""
    def rule(batch):
        for i in range(len(batch.texts)):
            keep = batch.rows[i] >= 0
            if batch.open(i) and keep.any():
                batch.rows[i][keep], batch.scores[i][keep] = batch.rows[i][keep][::-1], batch.scores[i][keep][::-1]
    return rule


def test_table_links_as_the_pipeline_does_and_looks_deeper(kb_dir):
    """R@1 is what ``nlp(doc)`` sets: the rows' first candidate comes from the pipeline's own ``top_k``
    (here 2, with a rule that puts the last candidate it gets first), and a deeper pass only appends."""
    nlp = spacy.blank("en")
    rules = {"reverse": {"@misc": "test.reverse_candidates.v1"}}
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "top_k": 2, "rules": rules})
    spans = [(0, 2, "D1"), (4, 6, "D2"), (7, 9, "D3")]
    rows, _ = mention_table(linker, [gold_doc(nlp, spans)])
    linked = nlp(gold_doc(nlp, spans))
    assert [r[1][0] for r in rows] == [e.kb_id_ for e in linked.ents]
    found = [[c for c in r[1] if c is not None] for r in rows]
    assert all(sorted(f) == ["D1", "D2", "D3", "D4", "D5"] for f in found)  # the KB's 5 entities, once each
    five, _ = mention_table(linker, [gold_doc(nlp, spans)], k=5)  # one pass with 5: another first candidate
    assert [r[1][0] for r in five] != [r[1][0] for r in rows]


def test_deepen_keeps_the_pipelines_ranks_and_appends_what_it_lacks():
    first = Linked(np.array([[0.9, 0.8, 0.0]], np.float32), np.array([[2, 0, -1]]), np.array([0.5]), np.zeros((1, 4)))
    further = Linked(np.array([[0.95, 0.9, 0.7, 0.6]], np.float32), np.array([[0, 3, 2, 1]]), np.array([0.1]), np.ones((1, 4)))
    out = deepen(first, further)
    assert out.rows.tolist() == [[2, 0, 3, 1]]
    assert out.scores[0].tolist() == pytest.approx([0.9, 0.8, 0.9, 0.6])
    assert out.confidence is first.confidence and out.features is first.features


ERROR_KB = [
    '{"id": "D1", "name": "lithium carbonate", "types": ["Chemical"]}',
    '{"id": "D3", "name": "atrial flutter", "aliases": ["flutter"], "types": ["Disease"]}',
    '{"id": "D6", "name": "ventricular flutter", "aliases": ["flutter"], "types": ["Disease"]}',
    '{"id": "D7", "name": "KF 17837", "types": ["Chemical"]}',
]


@pytest.fixture
def error_kb(tmp_path, tiny_encoder_dir):
    from spacy_pel.retrieval.build import build_kb
    from spacy_pel.retrieval.index import EntityIndex

    (tmp_path / "kb.jsonl").write_text("\n".join(ERROR_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "kb.jsonl", tmp_path / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return EntityIndex.from_disk(tmp_path / "kb")


def test_miss_causes_follow_the_kb_names_and_the_training_aliases(error_kb):
    from spacy_pel.evaluation.errors import miss_cause

    assert miss_cause("Lithium  Carbonate", ["D1"], error_kb) == "gold_name_unique"
    assert miss_cause("flutter", ["D3"], error_kb) == "gold_name_shared"  # D6 is named so too
    assert miss_cause("KF17837", ["D7"], error_kb) == "gold_name_unique"  # a code name without its space
    assert miss_cause("flutter", ["D1"], error_kb) == "no_name"  # a name, but of other entities
    assert miss_cause("lithium salt", ["D1"], error_kb) == "no_name"
    assert miss_cause("Lithium salt", ["D1"], error_kb, {"lithium salt": {"D1"}}) == "training_alias"
    assert miss_cause("lithium salt", ["D1"], error_kb, {"lithium salt": {"D7"}}) == "no_name"


def test_mention_errors_pair_rows_with_their_mentions(error_kb):
    from spacy_pel.evaluation.errors import mention_errors, summary, surface_ids

    nlp = spacy.blank("en")
    doc = nlp.make_doc("lithium carbonate and flutter and KF17837 and mystery and retired and aspirin")
    doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=k) for a, b, k in
                           [(0, 2, "D1"), (3, 4, "D3"), (5, 6, "D7"), (7, 8, "NIL"), (9, 10, "GONE"), (11, 12, "NIL")]]
    doc.user_data["pmid"] = "42"
    rows = [(["D1"], ["D1", "D3"], [0.9, 0.1], 0.2, None),   # right, under the threshold: called NIL
            (["D3"], ["D6", "D3"], [0.9, 0.8], 0.9, None),   # wrong entity, gold 2nd, ambiguous name
            (["D7"], ["D7", "D1"], [0.9, 0.1], 0.9, None),   # right: no error
            (["NIL"], ["D1"], [0.9], 0.9, None),             # a NIL mention linked
            (["GONE"], ["D1"], [0.9], 0.9, None),            # gold absent from the KB: not the linker's error
            (["NIL"], ["D1"], [0.9], 0.1, None)]             # NIL, called NIL: no error
    errors = mention_errors(rows, [doc], error_kb, threshold=0.5, training=surface_ids([doc], error_kb.canonical),
                            train_ids={"D3"})
    assert [(e["kind"], e["text"]) for e in errors] == [("called_nil", "lithium carbonate"), ("wrong_entity", "flutter"),
                                                        ("linked_nil", "mystery")]
    called, wrong, linked = errors
    assert called["predicted"] == "NIL" and called["first_candidate"] == "D1" and called["cause"] is None
    assert wrong["cause"] == "gold_name_shared" and wrong["gold_rank"] == 2 and wrong["predicted"] == "D6"
    assert wrong["gold_names"] == ["atrial flutter"] and wrong["first_candidate_name"] == "ventricular flutter"
    assert wrong["seen"] is True and called["seen"] is False and "seen" not in linked
    assert "carbonate and [[flutter]] and KF17837" in wrong["context"] and wrong["doc_id"] == "42"
    assert summary(errors) == {"kinds": {"wrong_entity": 1, "called_nil": 1, "linked_nil": 1},
                               "wrong_entity_causes": {"gold_name_unique": 0, "gold_name_shared": 1,
                                                       "training_alias": 0, "no_name": 0}}
    with pytest.raises(ValueError, match="rows and docs do not match"):
        mention_errors(rows[:-1], [doc], error_kb)


def test_errors_file_from_the_command_line(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    docs = [gold_doc(nlp, [(0, 2, "D1"), (4, 6, "D2"), (7, 9, "NIL"), (10, 11, "D5")])]
    write_docbin(docs, tmp_path / "gold.spacy")
    out, errors = tmp_path / "m.json", tmp_path / "errors.jsonl"
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--kb", str(kb_dir), "--output", str(out),
                                      "--errors", str(errors), "--threshold", "2.0", "--train", str(tmp_path / "gold.spacy")])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in errors.read_text().splitlines()]
    # threshold 2: every mention is called NIL — the three in-KB ones are errors (called NIL or wrong), the NIL one is not
    assert sorted(e["text"] for e in lines) == ["Lithium carbonate", "a", "tricuspid regurgitation"]
    assert all(e["predicted"] == "NIL" for e in lines)
    report = json.loads(out.read_text())
    assert sum(report["errors"]["kinds"].values()) == 3 and f"the errors, one per line: {errors}" in result.output
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--kb", str(kb_dir), "--e2e", "--errors", str(errors)])
    assert result.exit_code != 0 and "--errors lists gold mentions" in result.output and "Traceback" not in result.output


def cli_error(args) -> str:
    """The one ``error: …`` line of a refused command (exit status 2, no traceback)."""
    result = CliRunner().invoke(app, [str(a) for a in args])
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert result.exit_code == 2 and len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


def test_a_corpus_without_gold_mentions_is_refused(kb_dir, tmp_path, monkeypatch):
    """No gold mention: nothing to evaluate, not an accuracy of 0.000 with exit status 0. A linker of other labels'
    mentions only is refused before any linking, naming the linker and its labels."""
    nlp = spacy.blank("en")
    write_docbin([gold_doc(nlp, [])], tmp_path / "none.spacy")
    assert "nothing to evaluate" in cli_error([tmp_path / "none.spacy", "--kb", kb_dir])
    assert not (tmp_path / "m.json").exists()
    # a linker of some labels only: the corpus has gold mentions, none of the labels it links
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {"@misc": "spacy_pel.mentions.ents.v1",
                                                                        "labels": ["Chemical"]}})
    nlp.to_disk(tmp_path / "chemicals")
    write_docbin([gold_doc(nlp, [(0, 2, "D1")])], tmp_path / "x.spacy")  # labelled X
    monkeypatch.setattr("spacy_pel.cli.evaluate.mention_table", lambda *a, **k: pytest.fail("linked before refusing"))
    message = cli_error([tmp_path / "x.spacy", "--pipeline", tmp_path / "chemicals", "--output", tmp_path / "m.json"])
    assert "none of its gold mentions has a label the linker pel_linker links (Chemical)" in message
    assert "give --linker" in message and not (tmp_path / "m.json").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_a_threshold_that_is_not_finite_is_refused(kb_dir, tmp_path, value):
    write_docbin([gold_doc(spacy.blank("en"), [(0, 2, "D1")])], tmp_path / "gold.spacy")
    assert f"--threshold must be a finite number, not {value}" in cli_error(
        [tmp_path / "gold.spacy", "--kb", kb_dir, "--threshold", value])


def test_reports_are_written_atomically(kb_dir, tmp_path):
    """--output and --markdown replace the file whole (a new file renamed into place): a reader holding the
    previous report — here a hard link to it — never sees it rewritten in place, or half-written."""
    write_docbin([gold_doc(spacy.blank("en"), [(0, 2, "D1")])], tmp_path / "gold.spacy")
    out, md = tmp_path / "m.json", tmp_path / "m.md"
    for path in (out, md):
        path.write_text("previous report", encoding="utf8")
        os.link(path, tmp_path / f"held_{path.name}")
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--kb", str(kb_dir), "--output", str(out),
                                      "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["counts"]["in_kb"] == 1 and md.read_text().startswith("## spacy_pel evaluation")
    assert all((tmp_path / f"held_{p.name}").read_text() == "previous report" for p in (out, md))
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary file left
