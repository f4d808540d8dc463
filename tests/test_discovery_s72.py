"""Session 72: discovery with one ``pel_linker`` per KB. ``discover --linker NAME`` clusters the gold mentions of
NAME's labels only (default: the first linker's), the others left unlinked or as an earlier run left them; and
NIL cluster ids stay distinct across linkers (one ``pel_discovery`` per linker, or ``discover`` runs chained)."""
import json

import pytest
import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.discover import app
from spacy_pel.corpora import GOLD_KEY, read_docbin, write_docbin
from spacy_pel.discovery.cluster import DISCOVERED_KEY
from spacy_pel.discovery.nil_ids import next_nil_number, nil_cluster_ids
from tests.test_linker_labels import SPANS, TEXT, doc_with, ids_of, kbs, two_linkers  # noqa: F401 (kbs: a fixture)

GOLD = ["D1", "D4", "D3", "NIL"]  # lithium carbonate, aspirin (Chemical); atrial flutter, tricuspid regurgitation (Disease)


@pytest.fixture
def gold_and_pipeline(kbs, tmp_path):  # noqa: F811
    nlp = two_linkers(kbs)
    nlp.to_disk(tmp_path / "two")
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=label, kb_id=i) for (a, b, label), i in zip(SPANS, GOLD)]
    write_docbin([doc], tmp_path / "gold.spacy")
    return tmp_path / "gold.spacy", tmp_path / "two"


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def one_line_error(result, *fragments):
    """The one error line (spacy.load's warnings aside: the linkers have no NIL threshold)."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in result.output, result.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]


def read_one(path):
    return read_docbin(spacy.blank("en"), path)[0]


@pytest.mark.parametrize("linker, kind", [(None, "Chemical"), ("disease_linker", "Disease")])
def test_discover_links_only_the_chosen_linkers_labels(gold_and_pipeline, kbs, tmp_path, linker, kind):  # noqa: F811
    """Defect: every gold mention was linked with the first linker (Disease mentions got chemical-KB ids) and
    there was no --linker."""
    corpus, pipeline = gold_and_pipeline
    result = run(corpus, tmp_path / "out.spacy", "--pipeline", pipeline, "--linking", "cluster", "--threshold", "-1",
                 *(["--linker", linker] if linker else []))
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["linker"] == f"{kind.lower()}_linker" and report["mentions"] == 2 and report["linked"] == 2
    assert report["gold"]["mentions"] == 1 + (kind == "Chemical")  # its own labels' non-NIL gold mentions
    doc = read_one(tmp_path / "out.spacy")
    assert [(e.start, e.end, e.label_) for e in doc.ents] == SPANS  # every mention kept
    for ent in doc.ents:
        assert ent.kb_id_ in ids_of(kbs, kind) if ent.label_ == kind else ent.kb_id_ == "", (ent.text, ent.kb_id_)
    assert [s.label_ for s in doc.spans[DISCOVERED_KEY]] == [kind, kind]  # the clustered mentions only
    assert [s.kb_id_ for s in doc.spans[GOLD_KEY]] == GOLD


def test_discover_runs_chained_per_linker_keep_their_ids_apart(gold_and_pipeline, tmp_path):
    """The first run's output given to a run with the other linker: its ids kept, new NIL ids numbered after them."""
    corpus, pipeline = gold_and_pipeline
    nothing_links = ["--linking", "cluster", "--threshold", "2"]  # every mention its own NIL cluster
    first = run(corpus, tmp_path / "chemicals.spacy", "--pipeline", pipeline, *nothing_links)
    assert first.exit_code == 0, first.output
    second = run(tmp_path / "chemicals.spacy", tmp_path / "both.spacy", "--pipeline", pipeline, *nothing_links,
                 "--linker", "disease_linker")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["nil_clusters"] == 2
    doc = read_one(tmp_path / "both.spacy")
    assert [(e.label_, e.kb_id_) for e in doc.ents] == [("Chemical", "NIL:0"), ("Chemical", "NIL:1"),
                                                         ("Disease", "NIL:2"), ("Disease", "NIL:3")]
    assert [s.kb_id_ for s in doc.spans[DISCOVERED_KEY]] == ["NIL:0", "NIL:1", "NIL:2", "NIL:3"]
    assert [s.kb_id_ for s in doc.spans[GOLD_KEY]] == GOLD
    again = run(tmp_path / "both.spacy", tmp_path / "again.spacy", "--pipeline", pipeline, *nothing_links)
    assert again.exit_code == 0, again.output  # the chemicals clustered again: after the diseases' ids
    assert [e.kb_id_ for e in read_one(tmp_path / "again.spacy").ents] == ["NIL:4", "NIL:5", "NIL:2", "NIL:3"]


def test_discover_linker_errors_are_one_line(gold_and_pipeline, kb_dir, tmp_path):
    corpus, pipeline = gold_and_pipeline
    one_line_error(run(corpus, tmp_path / "out.spacy", "--pipeline", pipeline, "--linker", "drugs"),
                   "no pel_linker called 'drugs'", "chemical_linker, disease_linker")
    one_line_error(run(corpus, tmp_path / "out.spacy", "--kb", kb_dir, "--linker", "disease_linker"), "--pipeline")
    nlp = spacy.blank("en")
    doc = nlp.make_doc(TEXT)
    doc.ents = [Span(doc, a, b, label=label, kb_id=i) for (a, b, label), i in zip(SPANS[:2], GOLD)]
    write_docbin([doc], tmp_path / "chemicals_only.spacy")
    one_line_error(run(tmp_path / "chemicals_only.spacy", tmp_path / "out.spacy", "--pipeline", pipeline,
                       "--linker", "disease_linker"), "none of its gold mentions", "disease_linker", "Disease")
    assert not (tmp_path / "out.spacy").exists()


def test_one_discovery_per_linker_gives_distinct_nil_ids(kbs):  # noqa: F811
    """Defect: each pel_discovery numbered its clusters from NIL:0, so a chemical and a disease cluster shared ids."""
    nlp = two_linkers(kbs)
    for name in ("chemical_linker", "disease_linker"):
        nlp.add_pipe("pel_discovery", name=f"{name}_discovery", config={"linker": name, "threshold": 2.0})
    docs = list(nlp.pipe([doc_with(nlp), doc_with(nlp)]))  # one batch: the ids are the batch's
    ids = [[(e.label_, e.kb_id_) for e in doc.ents] for doc in docs]
    assert ids == [[("Chemical", "NIL:0"), ("Chemical", "NIL:1"), ("Disease", "NIL:4"), ("Disease", "NIL:5")],
                   [("Chemical", "NIL:2"), ("Chemical", "NIL:3"), ("Disease", "NIL:6"), ("Disease", "NIL:7")]]
    again = nlp(doc_with(nlp))  # a batch of its own: numbered afresh, the first linker's from NIL:0
    assert [e.kb_id_ for e in again.ents] == ["NIL:0", "NIL:1", "NIL:2", "NIL:3"]


def test_nil_numbers_continue_after_the_ids_held():
    assert next_nil_number(["D1", "NIL", "", "NIL:3", "NIL:x", "NIL:1", "NIL:²"]) == 4
    assert next_nil_number(["D1", "NIL"]) == 0
    assert nil_cluster_ids([0, 1, 0], [None, "E", None], [0, 1, 2], first=4) == ["NIL:4", "E", "NIL:4"]
