"""End-to-end mode: the span scorer trainer, find_spans in pel_linker, and e2e metrics."""
import pytest
import spacy
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.training.span_scorer import train_span_scorer


def gold_docs(nlp):
    texts = [
        ("Lithium carbonate toxicity caused tricuspid regurgitation .", [(0, 2, "D1"), (4, 6, "D2")]),
        ("Atrial flutter followed lithium carbonate use .", [(0, 2, "D3"), (3, 5, "D1")]),
        ("Aspirin and warfarin were given .", [(0, 1, "D4"), (2, 3, "D5")]),
    ]
    docs = []
    for text, spans in texts * 4:
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label="X", kb_id=k) for a, b, k in spans]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    return docs


def test_e2e_metrics_strict_and_partial():
    nlp = spacy.blank("en")
    gold = gold_docs(nlp)[:1]
    pred = nlp.make_doc(gold[0].text)
    pred.ents = [Span(pred, 0, 2, label="X", kb_id="D1"), Span(pred, 4, 5, label="X", kb_id="D2"), Span(pred, 6, 7, label="X", kb_id="D9")]
    m = e2e_metrics([pred], gold)
    assert m["strict"]["p"] == pytest.approx(1 / 3, abs=1e-3) and m["strict"]["r"] == 0.5
    assert m["partial"]["p"] == pytest.approx(2 / 3, abs=1e-3) and m["partial"]["r"] == 1.0


def test_train_span_scorer_and_find_spans(kb_dir, tiny_encoder_dir, tmp_path):
    nlp = spacy.blank("en")
    docs = gold_docs(nlp)
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    report = train_span_scorer(encoder, docs, docs, tmp_path / "spans", epochs=30, lr=0.05, progress=False)
    assert report["train"] == {"gold_spans": 24, "not_enumerable": 0}
    assert report["dev_span_strict"]["f"] > 0.5  # a linear scorer can fit 3 repeated sentences
    linker_nlp = spacy.blank("en")
    linker_nlp.add_pipe(
        "pel_linker",
        config={"kb": str(kb_dir), "find_spans": True, "span_threshold": report["threshold"],
                "span_scorer": str(tmp_path / "spans" / "span_scorer.safetensors")},
    )
    out = linker_nlp(linker_nlp.make_doc(docs[0].text))
    assert len(out.ents) > 0 and all(e.kb_id_ for e in out.ents) and all(e._.pel_candidates for e in out.ents)
    linker_nlp.to_disk(tmp_path / "pipe")
    again = spacy.load(tmp_path / "pipe")(linker_nlp.make_doc(docs[0].text))
    assert [(e.start, e.end, e.kb_id_, e.label_) for e in again.ents] == [(e.start, e.end, e.kb_id_, e.label_) for e in out.ents]
    assert list(linker_nlp.pipe([linker_nlp.make_doc(""), linker_nlp.make_doc("word")]))


def test_null_span_threshold_takes_the_trained_gamma_and_evaluate_e2e_cli(kb_dir, tiny_encoder_dir, tmp_path):
    import json

    from typer.testing import CliRunner

    from spacy_pel.cli.evaluate import app
    from spacy_pel.corpora import write_docbin

    nlp = spacy.blank("en")
    docs = gold_docs(nlp)
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    report = train_span_scorer(encoder, docs, docs, tmp_path / "spans", epochs=30, lr=0.05, progress=False)
    pipe = spacy.blank("en")
    linker = pipe.add_pipe("pel_linker", config={"kb": str(kb_dir), "find_spans": True, "span_threshold": None,
                                                 "span_scorer": str(tmp_path / "spans" / "span_scorer.safetensors")})
    pipe(pipe.make_doc(docs[0].text))
    assert linker.span_threshold == report["threshold"]
    pipe.to_disk(tmp_path / "pipe")
    assert spacy.load(tmp_path / "pipe").get_pipe("pel_linker").span_threshold == report["threshold"]
    write_docbin(docs, tmp_path / "gold.spacy")
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "pipe"), "--e2e",
                                      "--output", str(tmp_path / "e2e.json")])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "e2e.json").read_text())
    assert out["docs"] == len(docs) and out["gold"] == 24 and 0.0 <= out["strict"]["f"] <= out["partial"]["f"] <= 1.0
