"""Given mentions of a label no linker links (session 71's multi-linker probe, bug06): ``link`` and ``bulk``
leave them out of every output, and say so — counted by label in the report, the bulk markers and summary,
and warned about on stderr — instead of dropping them without a word."""
import json

import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.bulk.local import link_file
from spacy_pel.cli import app

from .test_bulk_s69 import in_process, link  # noqa: F401 (fixture)

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")
GIVEN = ("9|t|Aspirin blocks BRCA1 in flutter.\n9|a|TP53 and warfarin.\n9\t0\t7\tAspirin\tChemical\tD4\n"
         "9\t15\t20\tBRCA1\tGene\t672\n9\t24\t31\tflutter\tDisease\tD3\n9\t33\t37\tTP53\tGene\t7157\n"
         "9\t42\t50\twarfarin\tChemical\tD5\n\n")


@pytest.fixture
def chemical_pipeline(tmp_path, kb_dir):
    """pel_linker for the label Chemical only (one linker of a pipeline with one linker per KB)."""
    path = tmp_path / "chemicals"
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {"@misc": "spacy_pel.mentions.ents.v1",
                                                                     "labels": ["Chemical"]}})
    nlp.to_disk(path)
    return path


def test_link_counts_and_warns_about_given_mentions_no_linker_links(chemical_pipeline, tmp_path):
    corpus = tmp_path / "in.txt"
    corpus.write_text(GIVEN, encoding="utf8")
    report = link_file(corpus, tmp_path / "out.jsonl", chemical_pipeline, progress=False)
    written = json.loads((tmp_path / "out.jsonl").read_text().splitlines()[0])["mentions"]
    assert [m["text"] for m in written] == ["Aspirin", "warfarin"]
    assert report["mentions"] == 2 and report["not_linked_by_label"] == {"Gene": 2, "Disease": 1}
    result = CliRunner().invoke(app, ["link", str(corpus), str(tmp_path / "out.txt"), "--pipeline",
                                      str(chemical_pipeline), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["not_linked_by_label"] == {"Gene": 2, "Disease": 1}
    assert "3 given mention(s) not linked" in result.stderr and "Disease 1, Gene 2" in result.stderr


def test_a_linker_without_labels_links_every_label_and_counts_nothing(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir)})
    nlp.to_disk(tmp_path / "all")
    corpus = tmp_path / "in.txt"
    corpus.write_text(GIVEN, encoding="utf8")
    report = link_file(corpus, tmp_path / "out.jsonl", tmp_path / "all", progress=False)
    assert report["mentions"] == 5 and report["not_linked_by_label"] == {}


def test_bulk_counts_them_in_its_markers_and_summary(chemical_pipeline, tmp_path, in_process):  # noqa: F811
    corpus = tmp_path / "in"
    corpus.mkdir()
    (corpus / "a.txt").write_text(GIVEN, encoding="utf8")
    (corpus / "b.txt").write_text(GIVEN.replace("9", "8").replace("\t8\t", "\t9\t"), encoding="utf8")
    summary = link(corpus, tmp_path / "out", chemical_pipeline)
    assert summary["mentions"] == 4 and summary["not_linked_by_label"] == {"Gene": 4, "Disease": 2}
    markers = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "done").glob("*.json"))]
    assert [m["not_linked_by_label"] for m in markers] == [{"Gene": 2, "Disease": 1}] * 2
