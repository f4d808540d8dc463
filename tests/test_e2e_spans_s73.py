"""Session 73, bug01: ``evaluate --e2e`` and ``calibrate --e2e`` score the spans each pel_linker links — those of its
mention source (a span group for ``spacy_pel.mentions.span_group.v1``) — not ``doc.ents`` alone."""
import json

import spacy
from spacy.tokens import Span
from typer.testing import CliRunner

from spacy_pel.cli.calibrate import app as calibrate_app
from spacy_pel.cli.evaluate import app as evaluate_app
from spacy_pel.corpora import read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.evaluation.linking import e2e_metrics, linker_scope, pipeline_nil_labels, pipeline_scope

TITLE, ABSTRACT = "Warfarin and aspirin", "with atrial flutter."
GOLD = [(0, 8, "Warfarin", "Chemical", "D5"), (13, 20, "aspirin", "Chemical", "D4"),
        (26, 40, "atrial flutter", "Disease", "D3")]
PATTERNS = [{"label": "Chemical", "pattern": [{"LOWER": "warfarin"}]}, {"label": "Chemical", "pattern": [{"LOWER": "aspirin"}]},
            {"label": "Disease", "pattern": [{"LOWER": "atrial"}, {"LOWER": "flutter"}]}]


def span_group_pipeline(kb_dir, path):
    """A span_ruler writing doc.spans["sc"] (doc.ents left empty) and a pel_linker linking that group, by KB names."""
    nlp = spacy.blank("en")
    nlp.add_pipe("span_ruler", config={"spans_key": "sc"}).add_patterns(PATTERNS)
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {"@misc": "spacy_pel.mentions.span_group.v1", "spans_key": "sc"},
                                       "rules": {"aliases": {"@misc": "spacy_pel.rules.alias_table.v1"}}})
    nlp.to_disk(path)
    return path


def corpus(tmp_path):
    lines = [f"1|t|{TITLE}", f"1|a|{ABSTRACT}"] + ["\t".join(["1", str(a), str(b), text, label, i]) for a, b, text, label, i in GOLD]
    (tmp_path / "gold.txt").write_text("\n".join(lines) + "\n\n", encoding="utf8")
    convert_corpora([tmp_path / "gold.txt"], tmp_path / "gold.spacy")
    return tmp_path / "gold.spacy"


def test_e2e_metrics_of_a_span_group_pipeline_count_the_spans_its_linker_links(kb_dir, tmp_path):
    pipe = span_group_pipeline(kb_dir, tmp_path / "pipe")
    nlp = spacy.load(pipe)
    gold = read_docbin(nlp, corpus(tmp_path))
    predicted = [nlp(nlp.make_doc(d.text)) for d in gold]
    assert not predicted[0].ents and [s.kb_id_ for s in predicted[0].spans["sc"]] == ["D5", "D4", "D3"]
    for scope in (pipeline_scope(nlp), linker_scope(nlp.get_pipe("pel_linker"))):
        m = e2e_metrics(predicted, gold, scope, pipeline_nil_labels(nlp))
        assert (m["predicted"], m["gold"], m["strict"]["f"], m["typed"]["f"], m["span"]["f"]) == (3, 3, 1.0, 1.0, 1.0)


def test_evaluate_and_calibrate_e2e_of_a_span_group_pipeline(kb_dir, tmp_path):
    """evaluate --e2e reported predicted 0 and F1 0.0; calibrate --e2e refused "found no linked span"."""
    pipe = span_group_pipeline(kb_dir, tmp_path / "pipe")
    gold = corpus(tmp_path)
    result = CliRunner().invoke(evaluate_app, [str(gold), "--pipeline", str(pipe), "--e2e", "--output", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert (report["predicted"], report["gold"], report["strict"]["f"], report["partial"]["f"]) == (3, 3, 1.0, 1.0)
    assert report["predicted_mentions_per_s"] > 0
    result = CliRunner().invoke(calibrate_app, [str(pipe), str(gold), "--e2e", "-o", str(tmp_path / "cal")])
    assert result.exit_code == 0, result.output
    record = json.loads((tmp_path / "cal" / "nil_calibration.json").read_text())
    assert record["gold"] == 3 and record["without_threshold"]["kept"] == 3 and record["f"] == 1.0


def test_a_pipelines_scope_still_counts_the_ner_spans_no_linker_links(kb_dir):
    """The span measure of a whole pipeline counts every span of doc.ents (a Gene span an NER finds that no linker
    links) besides the span groups its linkers read, as before; one linker's scope, its own spans only."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {"@misc": "spacy_pel.mentions.ents.v1", "labels": ["Chemical"]}})
    text = nlp.make_doc("Warfarin binds BRCA1 .")
    pred, gold = nlp.make_doc(text.text), nlp.make_doc(text.text)
    pred.ents = [Span(pred, 0, 1, "Chemical", kb_id="D5"), Span(pred, 2, 3, "Gene")]
    gold.ents = [Span(gold, 0, 1, "Chemical", kb_id="D5"), Span(gold, 2, 3, "Gene", kb_id="G1")]
    whole = e2e_metrics([pred], [gold], pipeline_scope(nlp), pipeline_nil_labels(nlp))
    assert whole["span"]["p"] == 1.0 and whole["span"]["r"] == 1.0
    own = e2e_metrics([pred], [gold], linker_scope(nlp.get_pipe("pel_linker")), pipeline_nil_labels(nlp))
    assert own["span"]["f"] == 1.0 and own["gold"] == 1
