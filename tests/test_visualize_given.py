"""``visualize`` links a corpus's mentions as ``link`` and ``evaluate`` do: the pipeline's own NER does not add
mentions the corpus lacks, and a mention overlapping a longer one is linked, counted and said on the page."""
import json
import re

import spacy
from typer.testing import CliRunner

from spacy_pel.cli import convert, link, visualize

MARK = re.compile(r'<mark class="entity" id="m\d+"[^>]*>([^<]*)<')


def pipeline_with_a_ruler(kb_dir, path):
    nlp = spacy.blank("en")
    ruler = nlp.add_pipe("entity_ruler")
    ruler.add_patterns([{"label": "Chemical", "pattern": "warfarin"}])
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32"})
    nlp.to_disk(path)
    return path


def gold(tmp_path, pubtator):
    (tmp_path / "gold.pubtator").write_text(pubtator, encoding="utf8")
    result = CliRunner().invoke(convert.app, [str(tmp_path / "gold.pubtator"), str(tmp_path / "gold.spacy")])
    assert result.exit_code == 0, result.output
    return tmp_path / "gold.spacy"


def test_the_pipelines_ner_adds_nothing_to_a_gold_corpus(kb_dir, tmp_path):
    nlp = pipeline_with_a_ruler(kb_dir, tmp_path / "p")
    corpus = gold(tmp_path, "21|t|Aspirin and warfarin.\n21|a|Nothing else.\n21\t0\t7\tAspirin\tChemical\tD1\n\n")
    result = CliRunner().invoke(visualize.app, [str(corpus), str(tmp_path / "v.html"), "--pipeline", str(nlp)])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(link.app, [str(corpus), str(tmp_path / "out.jsonl"), "--pipeline", str(nlp), "--no-progress"])
    assert result.exit_code == 0, result.output
    linked = [m["text"] for line in open(tmp_path / "out.jsonl") for m in json.loads(line)["mentions"]]
    assert MARK.findall((tmp_path / "v.html").read_text()) == linked == ["Aspirin"]


def test_an_overlapping_mention_is_linked_counted_and_said(kb_dir, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": "fp32"})
    nlp.to_disk(tmp_path / "p")
    corpus = gold(tmp_path, "11|t|Tricuspid regurgitation and aspirin.\n11|a|None.\n"
                            "11\t0\t23\tTricuspid regurgitation\tDisease\tD2\n11\t0\t9\tTricuspid\tDisease\t-1\n"
                            "11\t28\t35\taspirin\tChemical\tD1\n\n")
    result = CliRunner().invoke(visualize.app, [str(corpus), str(tmp_path / "v.html"), "--pipeline", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert "1 linked mention(s) overlapping a longer one not drawn" in result.output
    html = (tmp_path / "v.html").read_text()
    assert MARK.findall(html) == ["Tricuspid regurgitation", "aspirin"]
    assert "1 linked mention(s) overlapping a longer one are not drawn" in html
