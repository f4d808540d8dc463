"""End-to-end mode: the span scorer trainer, pel_linker's span finder, and e2e metrics."""
import json

import pytest
import spacy
from spacy.tokens import Doc, Span

from spacy_pel.cli.calibrate import app as calibrate_app
from spacy_pel.corpora import GOLD_KEY
from spacy_pel.evaluation.linking import e2e_metrics
from spacy_pel.evaluation.nil import e2e_curve
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.pipeline.linker import CONFIDENCE_ATTR
from spacy_pel.pipeline.mentions import learn_labels
from spacy_pel.pipeline.nil import FEATURES, ClassifierNil
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


def test_e2e_metrics_match_spans_by_characters_and_alternative_ids_by_their_entity():
    nlp = spacy.blank("en")
    # the corpus split "SJS-like" at its annotation; the raw text's tokens do not
    gold = spacy.tokens.Doc(nlp.vocab, words=["Schwartz", "-", "Jampel", "syndrome", "(", "SJS", ")", "and", "SJS", "-like", "myopathy"],
                            spaces=[False, False, True, True, True, True, True, True, False, True, False])
    gold.spans[GOLD_KEY] = [Span(gold, 0, 4, label="X", kb_id="OMIM:255800"), Span(gold, 5, 6, label="X", kb_id="OMIM:255800"),
                            Span(gold, 10, 11, label="X", kb_id="D9")]
    pred = nlp.make_doc(gold.text)
    assert len(pred) != len(gold)  # token indices differ after "SJS-like"; characters do not
    by_char = [pred.char_span(s.start_char, s.end_char) for s in gold.spans[GOLD_KEY]]
    pred.ents = [Span(pred, s.start, s.end, label="X", kb_id=k) for s, k in zip(by_char, ["D010009", "D010009", "D9"])]
    assert e2e_metrics([pred], [gold])["span"]["f"] == 1.0
    assert e2e_metrics([pred], [gold])["strict"]["f"] == pytest.approx(1 / 3, abs=1e-3)
    # the KB files OMIM:255800 under D010009: the linker's answer is the gold entity
    primary = {"OMIM:255800": "D010009"}
    assert e2e_metrics([pred], [gold], lambda i: primary.get(i, i))["strict"]["f"] == 1.0


def test_e2e_metrics_nil_composite_ids_and_one_match_per_gold():
    nlp = spacy.blank("en")
    # Lithium(0) carbonate(1) toxicity(2) caused(3) tricuspid(4) regurgitation(5) .(6)
    gold = nlp.make_doc("Lithium carbonate toxicity caused tricuspid regurgitation .")
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, label="X", kb_id="D1|D4"), Span(gold, 2, 3, label="X", kb_id="NIL"),
                            Span(gold, 4, 6, label="X", kb_id="D2")]
    pred = nlp.make_doc(gold.text)
    pred.ents = [
        Span(pred, 0, 1, label="X", kb_id="D4"),  # overlaps gold 0 and is one of its ids: partial hit
        Span(pred, 1, 2, label="X", kb_id="D1"),  # overlaps gold 0 too, already matched: no second hit
        Span(pred, 2, 3, label="X", kb_id="NIL"),  # NIL prediction: left out
        Span(pred, 3, 4, label="X", kb_id="D5"),  # nothing there
        Span(pred, 4, 6, label="X", kb_id="D2"),  # exact: strict and partial hit
    ]
    m = e2e_metrics([pred], [gold])
    # 4 predictions and 2 gold mentions count; strict tp 1, partial tp 2
    assert (m["predicted"], m["gold"]) == (4, 2)
    assert m["strict"] == {"p": 0.25, "r": 0.5, "f": 0.3333}
    assert m["partial"] == {"p": 0.5, "r": 1.0, "f": 0.6667}


COLLECTIVE = {"@misc": "spacy_pel.vectors.collective.v1"}
ALIASES = {"@misc": "spacy_pel.rules.alias_table.v1"}  # the KB's names and synonyms

# entity → first KB type (conftest.KB_LINES): the label found spans take
TYPE = {"D1": "Chemical", "D2": "Disease", "D3": "Disease", "D4": "Chemical", "D5": "Chemical"}
EXPECTED = [  # (start, end, kb_id) of every mention of the three sentences of gold_docs
    [(0, 2, "D1"), (4, 6, "D2")],
    [(0, 2, "D3"), (3, 5, "D1")],
    [(0, 1, "D4"), (2, 3, "D5")],
]


def found(doc):
    return [(e.start, e.end, e.kb_id_, e.label_) for e in doc.ents]


def test_train_span_scorer_and_span_finder(kb_dir, tiny_encoder_dir, tmp_path):
    nlp = spacy.blank("en")
    docs = gold_docs(nlp)
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    report = train_span_scorer(encoder, docs, docs, tmp_path / "spans", epochs=30, lr=0.05, progress=False)
    assert report["train"] == {"gold_spans": 24, "not_enumerable": 0}
    assert report["dev_span_strict"] == {"p": 1.0, "r": 1.0, "f": 1.0}  # a linear scorer fits 3 repeated sentences
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": report["threshold"],
              "scorer": str(tmp_path / "spans" / "span_scorer.safetensors")}
    config = {"kb": str(kb_dir), "mentions": finder, "vectors": COLLECTIVE}
    # the bi-encoder alone: exactly the gold spans, each linked to its best candidate, labelled with its type
    plain = spacy.blank("en")
    plain.add_pipe("pel_linker", config=config)
    reference = spacy.blank("en")  # the same spans linked from gold ents, one pass per doc
    reference.add_pipe("pel_linker", config={"kb": str(kb_dir), "vectors": COLLECTIVE})
    for doc in docs[:3]:
        out = plain(plain.make_doc(doc.text))
        assert [(e.start, e.end) for e in out.ents] == [(s.start, s.end) for s in doc.ents]
        for e in out.ents:
            assert e.kb_id_ == e._.pel_candidates[0][0] and e.label_ == TYPE[e.kb_id_]
        ref = reference(doc.copy())
        assert [[c[:2] for c in e._.pel_candidates] for e in out.ents] == [[c[:2] for c in e._.pel_candidates] for e in ref.ents]
        assert [e._.pel_candidates[0][2] for e in out.ents] == pytest.approx([e._.pel_candidates[0][2] for e in ref.ents], abs=1e-4)
    # with the KB names as aliases every found mention gets its right entity (the bi-encoder alone does not)
    linker_nlp = spacy.blank("en")
    linker_nlp.add_pipe("pel_linker", config={**config, "rules": {"aliases": ALIASES}})
    expected = [[(a, b, k, TYPE[k]) for a, b, k in sentence] for sentence in EXPECTED]
    outs = [linker_nlp(linker_nlp.make_doc(doc.text)) for doc in docs[:3]]
    assert [found(d) for d in outs] == expected
    assert [found(plain(plain.make_doc(doc.text))) for doc in docs[:3]] != expected
    # labels: a KB type → label map from the config, else the one learned in training (the scorer's report)
    mapped = spacy.blank("en")
    mapped.add_pipe("pel_linker", config={**config, "mentions": {**finder, "labels": {"Chemical": "CHEM"}},
                                          "rules": {"aliases": ALIASES}})
    relabel = {"Chemical": "CHEM", "Disease": "Disease"}
    assert [found(mapped(mapped.make_doc(doc.text))) for doc in docs[:3]] == [
        [(a, b, k, relabel[label]) for a, b, k, label in sentence] for sentence in expected]
    learned = learn_labels(docs, linker_nlp.get_pipe("pel_linker").index)
    assert learned == {"Chemical": "X", "Disease": "X"}  # gold_docs label every span X
    (tmp_path / "spans" / "span_report.json").write_text(json.dumps({**report, "labels": {"Disease": "DIS"}}))
    from_report = spacy.blank("en")
    from_report.add_pipe("pel_linker", config={**config, "rules": {"aliases": ALIASES}})
    outs = [found(from_report(from_report.make_doc(doc.text))) for doc in docs[:3]]
    assert [[x[3] for x in d] for d in outs] == [[{"Disease": "DIS"}.get(TYPE[k], TYPE[k]) for _, _, k in s] for s in EXPECTED]
    from_report.to_disk(tmp_path / "relabelled")  # the learned map travels with the pipeline
    again = spacy.load(tmp_path / "relabelled")
    assert [found(again(again.make_doc(doc.text))) for doc in docs[:3]] == outs
    linker_nlp.to_disk(tmp_path / "pipe")
    again = spacy.load(tmp_path / "pipe")
    assert [found(again(again.make_doc(doc.text))) for doc in docs[:3]] == expected
    # pipe: an empty doc and a one-word doc in the batch change nothing for the others
    texts = ["", "word", *(doc.text for doc in docs[:3])]
    piped = list(linker_nlp.pipe(linker_nlp.make_doc(t) for t in texts))
    assert [len(d) for d in piped] == [0, 1, 7, 7, 6]
    assert found(piped[0]) == [] and found(piped[1]) == found(linker_nlp(linker_nlp.make_doc("word")))
    assert [found(d) for d in piped[2:]] == expected


def test_null_finder_threshold_takes_the_trained_gamma_and_evaluate_e2e_cli(kb_dir, tiny_encoder_dir, tmp_path):
    import json

    from typer.testing import CliRunner

    from spacy_pel.cli.evaluate import app
    from spacy_pel.corpora import write_docbin

    nlp = spacy.blank("en")
    docs = gold_docs(nlp)
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    report = train_span_scorer(encoder, docs, docs, tmp_path / "spans", epochs=30, lr=0.05, progress=False)
    pipe = spacy.blank("en")
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": None,
              "scorer": str(tmp_path / "spans" / "span_scorer.safetensors")}
    linker = pipe.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": finder, "vectors": COLLECTIVE,
                                                 "rules": {"aliases": ALIASES}})
    pipe(pipe.make_doc(docs[0].text))
    assert linker.mentions.threshold == report["threshold"]
    pipe.to_disk(tmp_path / "pipe")
    assert spacy.load(tmp_path / "pipe").get_pipe("pel_linker").mentions.threshold == report["threshold"]
    # the pipeline finds and links the 24 gold mentions exactly (test above); in the gold corpus the 4
    # "tricuspid regurgitation" mentions are cut to "tricuspid": strict misses them, partial does not
    for doc in docs[::3]:
        doc.spans[GOLD_KEY] = [Span(doc, 0, 2, label="X", kb_id="D1"), Span(doc, 4, 5, label="X", kb_id="D2")]
    write_docbin(docs, tmp_path / "gold.spacy")
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "pipe"), "--e2e",
                                      "--output", str(tmp_path / "e2e.json")])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "e2e.json").read_text())
    assert (out["docs"], out["gold"], out["predicted"]) == (12, 24, 24)
    assert out["strict"] == {"p": 0.8333, "r": 0.8333, "f": 0.8333}  # 20 / 24
    assert out["partial"] == {"p": 1.0, "r": 1.0, "f": 1.0}
    assert out["tokens"] == "pipeline"  # the text tokenized as a user's is, not the corpus's tokens
    # a corpus whose tokens are split where the tokenizer would not split (at a gold boundary inside a
    # word): its own tokens reach the span, the text as a user gives it does not
    glued = Doc(nlp.vocab, words=["Lithium", "carbonate", "toxicity"], spaces=[False, True, False])  # "Lithiumcarbonate toxicity"
    glued.spans[GOLD_KEY] = [Span(glued, 0, 1, label="X", kb_id="D1")]
    write_docbin([glued], tmp_path / "glued.spacy")
    for flag, tokens in (([], ["Lithiumcarbonate", "toxicity"]), (["--corpus-tokens"], ["Lithium", "carbonate", "toxicity"])):
        seen = []
        real_pipe = spacy.Language.pipe
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(spacy.Language, "pipe", lambda self, docs, **kw: real_pipe(self, [seen.append([t.text for t in d]) or d for d in docs], **kw))
            result = CliRunner().invoke(app, [str(tmp_path / "glued.spacy"), "--pipeline", str(tmp_path / "pipe"), "--e2e", *flag,
                                              "--output", str(tmp_path / "glued.json")])
        assert result.exit_code == 0, result.output
        assert seen == [tokens] and json.loads((tmp_path / "glued.json").read_text())["tokens"] == ("corpus" if flag else "pipeline")
    # calibrate --e2e: the threshold with the best strict F1 is written into the config, and the
    # calibrated pipeline scores what the curve promised
    result = CliRunner().invoke(calibrate_app, [str(tmp_path / "pipe"), str(tmp_path / "gold.spacy"), "--e2e",
                                                "--output", str(tmp_path / "calibrated")])
    assert result.exit_code == 0, result.output
    chosen = json.loads((tmp_path / "calibrated" / "nil_calibration.json").read_text())
    assert chosen["objective"] == "strict end-to-end F1" and chosen["f"] >= chosen["without_threshold"]["f"]
    assert spacy.load(tmp_path / "calibrated").get_pipe("pel_linker").threshold == chosen["threshold"]
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "calibrated"), "--e2e",
                                      "--output", str(tmp_path / "e2e_calibrated.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "e2e_calibrated.json").read_text())["strict"]["f"] == pytest.approx(chosen["f"], abs=1e-4)
    # calibrate --e2e --nil classifier: a logistic model of a found span being a strict hit, over the
    # evidence the pipeline computes when it links (the finder's span probability among it): the
    # saved pipeline scores what the fitted curve promised, so calibration and linking see the same
    result = CliRunner().invoke(calibrate_app, [str(tmp_path / "pipe"), str(tmp_path / "gold.spacy"), "--e2e",
                                                "--nil", "classifier", "--output", str(tmp_path / "c2")])
    assert result.exit_code == 0, result.output
    fitted = json.loads((tmp_path / "c2" / "nil_calibration.json").read_text())
    assert set(fitted["classifier"]["weights"]) == set(FEATURES) and fitted["f"] >= fitted["without_threshold"]["f"]
    loaded = spacy.load(tmp_path / "c2").get_pipe("pel_linker")
    assert isinstance(loaded.nil, ClassifierNil) and loaded.threshold == fitted["threshold"]
    result = CliRunner().invoke(app, [str(tmp_path / "gold.spacy"), "--pipeline", str(tmp_path / "c2"), "--e2e",
                                      "--output", str(tmp_path / "e2e_c2.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "e2e_c2.json").read_text())["strict"]["f"] == pytest.approx(fitted["f"], abs=1e-4)
    # the finder gives each found span its probability, and linking puts it in the evidence
    some = [pipe.make_doc(d.text) for d in docs[:3]]
    found = linker.mentions.find(some, linker.encoder, 8)
    assert [len(p) for p in found.probs] == [len(s) for s in found.spans] and all(0 < p <= 1 for ps in found.probs for p in ps)
    evidence = [linked.features[:, FEATURES.index("span")].tolist() for _, linked in linker.predict(some)]
    assert evidence == [pytest.approx(ps) for ps in found.probs]
    result = CliRunner().invoke(calibrate_app, [str(tmp_path / "pipe"), str(tmp_path / "gold.spacy"), "--e2e",
                                                "--max-r1-loss", "0.01", "--output", str(tmp_path / "c3")])
    assert result.exit_code != 0 and "leave out --max-r1-loss" in result.output and "Traceback" not in result.output


def test_e2e_curve_drops_low_confidence_spans_when_that_pays():
    """Found spans below the threshold become NIL: the spurious one (low confidence) goes, F1 rises from
    2·2/(3+3) to 2·2/(2+3); a curve whose low-confidence span is right keeps everything (no threshold)."""
    nlp = spacy.blank("en")
    gold = nlp.make_doc("Lithium carbonate toxicity caused tricuspid regurgitation and fever .")
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, label="X", kb_id="D1"), Span(gold, 4, 6, label="X", kb_id="D2"),
                            Span(gold, 7, 8, label="X", kb_id="D9")]

    def predicted(confidences):
        doc = nlp.make_doc(gold.text)
        doc.ents = [Span(doc, 0, 2, label="X", kb_id="D1"), Span(doc, 2, 3, label="X", kb_id="D7"),
                    Span(doc, 4, 6, label="X", kb_id="D2")]
        for span, c in zip(doc.ents, confidences):
            span._.set(CONFIDENCE_ATTR, c)
        return doc

    curve = e2e_curve([predicted([0.9, 0.2, 0.5])], [gold])
    assert curve["threshold"] == pytest.approx(0.35) and curve["kept"] == 2
    assert curve["f"] == pytest.approx(0.8) and curve["without_threshold"]["f"] == pytest.approx(2 / 3)
    assert curve["p"] == pytest.approx(1.0) and curve["r"] == pytest.approx(2 / 3)
    kept_all = e2e_curve([predicted([0.2, 0.9, 0.5])], [gold])  # the right span is the least confident
    assert kept_all["threshold"] is None and kept_all["kept"] == 3


def test_e2e_metrics_typed_needs_the_label_and_span_ignores_ids():
    nlp = spacy.blank("en")
    gold = nlp.make_doc("Lithium carbonate toxicity caused tricuspid regurgitation .")
    gold.spans[GOLD_KEY] = [Span(gold, 0, 2, label="Chemical", kb_id="D1"), Span(gold, 2, 3, label="Disease", kb_id="NIL"),
                            Span(gold, 4, 6, label="Disease", kb_id="D2")]
    pred = nlp.make_doc(gold.text)
    pred.ents = [
        Span(pred, 0, 2, label="Chemical", kb_id="D1"),  # right span, label and id
        Span(pred, 2, 3, label="Disease", kb_id="NIL"),  # a found NIL span: counts for spans only
        Span(pred, 4, 6, label="Chemical", kb_id="D2"),  # right span and id, wrong label: strict, not typed
    ]
    m = e2e_metrics([pred], [gold])
    assert m["strict"]["f"] == 1.0
    assert m["typed"] == {"p": 0.5, "r": 0.5, "f": 0.5}
    assert m["span"] == {"p": 1.0, "r": 1.0, "f": 1.0}
    pred.ents = [Span(pred, 0, 2, label="Chemical", kb_id="D9"), Span(pred, 3, 4, label="Chemical", kb_id="D2")]
    m = e2e_metrics([pred], [gold])
    assert m["strict"]["f"] == 0.0 and m["span"] == {"p": 0.5, "r": 0.3333, "f": 0.4}


def test_a_found_span_keeps_its_kb_type_label_when_it_is_nil(kb_dir, tiny_encoder_dir, tmp_path):
    """A span finder without a label head names a found span by its best candidate's KB types: a span the
    NIL threshold turns NIL keeps that label (it was ``ENTITY``: the label hung on the threshold)."""
    nlp = spacy.blank("en")
    docs = gold_docs(nlp)
    report = train_span_scorer(BiEncoder.from_pretrained(tiny_encoder_dir), docs, docs, tmp_path / "spans", epochs=30,
                               lr=0.05, progress=False)
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": report["threshold"],
              "scorer": str(tmp_path / "spans" / "span_scorer.safetensors")}
    labels = {}
    for threshold in (None, 1.0):  # no NIL decision / every mention NIL (no cosine score reaches 1)
        pipe = spacy.blank("en")
        pipe.add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": finder, "vectors": COLLECTIVE, "threshold": threshold})
        out = pipe(pipe.make_doc(docs[0].text))
        labels[threshold] = [(e.start, e.end, e.label_) for e in out.ents]
        assert all((e.kb_id_ == "NIL") == (threshold is not None) for e in out.ents)
    assert labels[1.0] == labels[None] and labels[None] and "ENTITY" not in {label for *_, label in labels[None]}
