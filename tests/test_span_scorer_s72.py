"""``train-spans`` writes its span scorer's γ (``span_report.json``) before the scorer itself, atomically (session
72's probe of interrupted runs): a kill between the two never leaves a scorer that a span finder would load with
the default γ 0.5 instead of the tuned one."""
import json

import spacy

from spacy_pel.models.encoder import BiEncoder
from spacy_pel.training import span_scorer

from .test_e2e import gold_docs


def test_the_span_report_is_there_before_the_scorer_is_written(tiny_encoder_dir, tmp_path, monkeypatch):
    output, seen = tmp_path / "spans", []
    real = span_scorer.save_span_scorer

    def save(scorer, path):
        if path == output / span_scorer.SCORER_FILE:  # the final scorer (best/'s is saved by the loop)
            seen.append((output / "span_report.json").is_file())
        real(scorer, path)

    monkeypatch.setattr(span_scorer, "save_span_scorer", save)
    docs = gold_docs(spacy.blank("en"))
    report = span_scorer.train_span_scorer(BiEncoder.from_pretrained(tiny_encoder_dir), docs, docs, output, epochs=2,
                                           progress=False)
    assert seen == [True]
    assert json.loads((output / "span_report.json").read_text())["threshold"] == report["threshold"]
