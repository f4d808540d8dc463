"""The end-to-end span model of ``train_e2e`` as pel_linker's span finder: its own fine-tuned
transformer and label head, found spans linked by the linker's retriever through the candidate
rules, saved inside the pipeline; and a joint run stopped mid-epoch resumes on the same documents."""
import shutil

import pytest
import spacy
import srsly
import torch
from spacy.tokens import Span

from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.models.doc_encoder import encode_docs, enumerate_doc_spans
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.span_scorer import load_span_scorer, save_span_scorer
from spacy_pel.pipeline import mentions as mentions_module
from spacy_pel.training.config import JointConfig
from spacy_pel.training.joint import JointTask, train_e2e
from spacy_pel.training.loop import checkpoint_to_resume
from spacy_pel.training.run_config import load_config
from tests.test_train_e2e import CONFIG_DEFAULT

TEXTS = [
    ("Lithium carbonate toxicity caused tricuspid regurgitation .", [(0, 2, "D1", "Chemical"), (4, 6, "D2", "Disease")]),
    ("Atrial flutter followed lithium carbonate use .", [(0, 2, "D3", "Disease"), (3, 5, "D1", "Chemical")]),
    ("Aspirin and warfarin were given .", [(0, 1, "D4", "Chemical"), (2, 3, "D5", "Chemical")]),
]
GOLD = [[(a, b, k, label) for a, b, k, label in spans] for _, spans in TEXTS]
ALIASES = {"@misc": "spacy_pel.rules.alias_table.v1"}  # the KB's names and synonyms
PER_MENTION = {"@misc": "spacy_pel.vectors.per_mention.v1"}


@pytest.fixture
def corpus(tmp_path):
    nlp = spacy.blank("en")
    docs = []
    for text, spans in TEXTS * 4:
        doc = nlp.make_doc(text)
        doc.spans[GOLD_KEY] = [Span(doc, a, b, label=label, kb_id=k) for a, b, k, label in spans]
        doc.ents = list(doc.spans[GOLD_KEY])
        docs.append(doc)
    write_docbin(docs, tmp_path / "train.spacy")
    return tmp_path / "train.spacy"


def settings(corpus, kb_dir, encoder, **extra):
    return {"paths.train": str(corpus), "paths.dev": str(corpus), "paths.kb": str(kb_dir), "encoder.base": str(encoder),
            "training.batch_docs": 2, "training.lr": 0.003, "training.eval_every": 6, "training.eval_docs": 0,
            "training.device": "cpu", "spans.max_len": 4, "negatives.count": 3, "training.select": "span", **extra}


def found(doc):
    return [(e.start, e.end, e.kb_id_, e.label_) for e in doc.ents]


@pytest.fixture
def span_model(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 36})
    state = train_e2e(CONFIG_DEFAULT, tmp_path / "run", ov, progress=False)
    return tmp_path / "run" / "best", ov, state


def test_label_head_trains_and_round_trips(span_model):
    best, ov, state = span_model
    cfg = JointConfig.from_config(load_config(CONFIG_DEFAULT, ov))
    scratch, trained = JointTask(cfg), JointTask(cfg, checkpoint_to_resume(best.parent))
    assert trained.scorer.labels == scratch.scorer.labels == ["Chemical", "Disease"]  # the corpus's labels
    for task in (scratch, trained):
        task.encoder.eval()
    with torch.no_grad():
        before, after = scratch.losses(scratch.train_docs)[3], trained.losses(trained.train_docs)[3]
    assert after < 0.5 * before
    # the label head names the training spans' labels, and reads back exactly from its files
    loaded = load_span_scorer(best / "span_scorer.safetensors")
    assert loaded.labels == ["Chemical", "Disease"]
    ex = trained.train_docs[0]
    with torch.no_grad():
        H = encode_docs(trained.encoder, [ex.doc])[0]
        idx = [i for i, _ in ex.span_labels]
        assert trained.scorer.predict_labels(H, ex.starts[idx], ex.ends[idx]) == [x for _, x in ex.span_labels]
        best_scorer = load_span_scorer(best / "span_scorer.safetensors")
        best_h = encode_docs(BiEncoder.from_pretrained(best), [ex.doc])[0]
        assert torch.allclose(best_scorer.label_logits(best_h, ex.starts[idx], ex.ends[idx]),
                              loaded.label_logits(best_h, ex.starts[idx], ex.ends[idx]))
    assert state["span_report"]["dev"]["span"]["f"] >= 0.75


def test_span_model_finds_labels_and_its_spans_go_through_the_rules(span_model, kb_dir, tiny_encoder_dir, tmp_path):
    best, _, state = span_model
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best)}
    # the linker links with the (untrained) base encoder; the finder has its own trained transformer
    config = {"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "mentions": finder, "vectors": PER_MENTION}
    plain, ruled = spacy.blank("en"), spacy.blank("en")
    plain.add_pipe("pel_linker", config=config)
    linker = ruled.add_pipe("pel_linker", config={**config, "rules": {"aliases": ALIASES}})
    outs = [found(ruled(ruled.make_doc(text))) for text, _ in TEXTS]
    gold = {(i, a, b): (k, label) for i, spans in enumerate(GOLD) for a, b, k, label in spans}
    hits = [(i, a, b) for i, doc in enumerate(outs) for a, b, _, _ in doc if (i, a, b) in gold]
    assert len(hits) >= 5  # of 6 gold spans
    for i, doc in enumerate(outs):
        for a, b, k, label in doc:
            if (i, a, b) in gold:  # the label head's label, and the alias rule's id
                assert (k, label) == gold[(i, a, b)]
    # without the rules the base encoder alone links some of the same spans wrongly
    plain_outs = [found(plain(plain.make_doc(text))) for text, _ in TEXTS]
    assert [[x[:2] for x in d] for d in plain_outs] == [[x[:2] for x in d] for d in outs]
    assert [[x[2] for x in d] for d in plain_outs] != [[x[2] for x in d] for d in outs]
    assert linker.mentions.encoder is not None and linker.mentions.encoder is not linker.encoder
    docs = [ruled.make_doc(t) for t, _ in TEXTS]
    assert linker.mentions.find(docs, linker.encoder, 8)[1] is None  # no token vectors of another transformer
    # the pipeline holds the span model: it loads and links the same after the training folder is gone
    ruled.to_disk(tmp_path / "pipe")
    assert (tmp_path / "pipe" / "pel_linker" / "span_encoder").is_dir()
    assert srsly.read_json(tmp_path / "pipe" / "pel_linker" / "span_report.json")["threshold"] == state["span_report"]["threshold"]
    shutil.rmtree(best.parent)
    again = spacy.load(tmp_path / "pipe")
    assert [found(again(again.make_doc(text))) for text, _ in TEXTS] == outs


def test_joint_run_stopped_mid_epoch_resumes_on_the_same_documents(corpus, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    # 12 docs, 1 per step: checkpoints at steps 5 and 10 fall mid-epoch
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"training.batch_docs": 1, "training.eval_every": 5,
                                                        "training.max_steps": 14})
    step, seen = JointTask.step, []

    def record(self, batch):
        seen.append([ex.doc.text for ex in batch])
        if len(seen) == 8 and stop:
            raise KeyboardInterrupt
        return step(self, batch)

    monkeypatch.setattr(JointTask, "step", record)
    stop = False
    whole = train_e2e(CONFIG_DEFAULT, tmp_path / "whole", ov, progress=False)
    reference, seen[:] = list(seen), []
    stop = True
    with pytest.raises(KeyboardInterrupt):
        train_e2e(CONFIG_DEFAULT, tmp_path / "cut", ov, progress=False)
    before, seen[:] = list(seen), []
    stop = False
    resumed = train_e2e(CONFIG_DEFAULT, tmp_path / "cut", ov, progress=False)
    # steps 1-5 were kept by the step-5 checkpoint; the resumed run does steps 6-14 of the same order
    assert before[:5] + seen == reference and len(seen) == 9
    assert resumed["step"] == whole["step"] == 14
    assert resumed["history"][0] == whole["history"][0]


def test_bio_scorer_gives_each_span_the_probability_of_its_tags(tmp_path):
    from spacy_pel.models.span_scorer import SpanScorer, bio_tags, save_span_scorer

    assert bio_tags(6, [(0, 2), (1, 3), (4, 5)]).tolist() == [1, 2, 0, 0, 1, 0]  # (1, 3) overlaps (0, 2): left out
    torch.manual_seed(0)
    scorer = SpanScorer(8, ["A"], kind="bio")
    H = torch.randn(5, 8)
    p = torch.softmax(scorer.tag_logits(H), -1).detach()  # columns O, B, I
    starts, ends = [0, 1, 3, 4], [1, 3, 5, 5]
    expected = [p[0, 1] * (1 - p[1, 2]), p[1, 1] * p[2, 2] * (1 - p[3, 2]), p[3, 1] * p[4, 2], p[4, 1]]
    assert scorer.probs(H, starts, ends).detach() == pytest.approx(torch.stack(expected), rel=1e-4)
    save_span_scorer(scorer, tmp_path / "s.safetensors")
    loaded = load_span_scorer(tmp_path / "s.safetensors")
    assert loaded.kind == "bio" and torch.allclose(loaded.probs(H, starts, ends), scorer.probs(H, starts, ends))


def test_bio_span_model_on_first_pieces_trains_and_finds_the_spans(corpus, kb_dir, tiny_encoder_dir, tmp_path):
    ov = settings(corpus, kb_dir, tiny_encoder_dir, **{"training.max_steps": 36, "spans.kind": "bio", "spans.pooling": "first"})
    state = train_e2e(CONFIG_DEFAULT, tmp_path / "bio", ov, progress=False)
    loaded = load_span_scorer(tmp_path / "bio" / "best" / "span_scorer.safetensors")
    assert (loaded.kind, loaded.pooling) == ("bio", "first")
    assert state["span_report"]["dev"]["span"]["f"] >= 0.75


def test_first_piece_pooling_takes_each_tokens_first_word_piece(tiny_encoder_dir):
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    doc = spacy.blank("en")("Hydroxyanisole and BHA")
    mean, first = encode_docs(encoder, [doc])[0], encode_docs(encoder, [doc], pooling="first")[0]
    pieces = encoder.tokenizer(doc.text, add_special_tokens=False)["input_ids"]
    assert len(pieces) > len(doc)  # some token has several pieces: the two poolings differ there
    assert not torch.allclose(mean, first)
    with torch.inference_mode():
        ids = torch.tensor([[encoder.tokenizer.cls_token_id, *pieces, encoder.tokenizer.sep_token_id]])
        states = encoder.mention_model(input_ids=ids).last_hidden_state[0, 1:-1].float()
    starts = [0]
    for t in doc[:-1]:
        starts.append(starts[-1] + len(encoder.tokenizer(t.text, add_special_tokens=False)["input_ids"]))
    assert torch.allclose(first, states[starts], atol=1e-4)
    with pytest.raises(ValueError, match="pooling"):
        encode_docs(encoder, [doc], pooling="last")


def test_propagate_floor_reaches_propagation_with_the_span_models_probabilities(span_model, kb_dir, tiny_encoder_dir, monkeypatch):
    best, _, _ = span_model
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best), "propagate": True}
    calls = []
    real = mentions_module.propagate
    monkeypatch.setattr(mentions_module, "propagate", lambda doc, kept, support, floor: calls.append((doc, support, floor)) or real(doc, kept, support, floor))
    for floor in (0.0, 0.3):
        nlp = spacy.blank("en")
        linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "vectors": PER_MENTION,
                                                    "mentions": {**finder, "propagate_floor": floor}})
        nlp(nlp.make_doc(TEXTS[0][0]))
        doc, support, seen_floor = calls[-1]
        assert seen_floor == floor
        if floor == 0.0:
            assert support is None  # every occurrence, as before the setting
            continue
        finder_part = linker.mentions
        (H,) = encode_docs(finder_part.encoder, [doc], pooling=finder_part.scorer.pooling)
        starts, ends = enumerate_doc_spans(doc, finder_part.max_span_len)
        with torch.inference_mode():
            probs = finder_part.scorer.probs(H, starts, ends).float().numpy()
        for i in (0, len(starts) // 2, len(starts) - 1):
            assert abs(support(int(starts[i]), int(ends[i])) - float(probs[i])) < 1e-5
        assert support(0, finder_part.max_span_len + 5) == 0.0  # longer than any enumerated span
    for bad in (-0.1, 1.5, None, "high"):
        with pytest.raises(ValueError, match="propagate_floor"):
            spacy.blank("en").add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {**finder, "propagate_floor": bad}})


def test_lexicon_adds_training_surface_forms_with_labels_travels_with_the_pipeline_and_null_turns_it_off(
        span_model, kb_dir, tiny_encoder_dir, tmp_path):
    best, _, _ = span_model
    aliases = tmp_path / "aliases.json"
    srsly.write_json(aliases, {"use": {"D1": 1}, "given": {"D4": 2}})  # strings the span model does not find
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best), "lexicon": str(aliases), "lexicon_floor": 0.0}
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "vectors": PER_MENTION, "mentions": finder})
    text = TEXTS[1][0] + " " + TEXTS[2][0]  # ... lithium carbonate use . Aspirin and warfarin were given .
    doc = nlp(text)
    words = [e.text for e in doc.ents]
    assert "use" in words and "given" in words
    assert {e.label_ for e in doc.ents if e.text in ("use", "given")} <= {"Chemical", "Disease"}  # the label head's
    nlp.to_disk(tmp_path / "p")
    aliases.unlink()  # the saved pipeline carries its lexicon
    assert [e.text for e in spacy.load(tmp_path / "p")(text).ents] == words
    off = spacy.load(tmp_path / "p", config={"components.pel_linker.mentions.lexicon": None})
    assert not {"use", "given"} & {e.text for e in off(text).ents}
    other = tmp_path / "other.json"  # another lexicon in the config: read from there, not the saved copy
    srsly.write_json(other, {"use": {"D1": 1}})
    again = spacy.load(tmp_path / "p", config={"components.pel_linker.mentions.lexicon": str(other)})
    assert {e.text for e in again(text).ents} & {"use", "given"} == {"use"}
    for bad in (-0.1, 2, None):
        with pytest.raises(ValueError, match="lexicon_floor"):
            spacy.blank("en").add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {**finder, "lexicon_floor": bad}})


def test_lexicon_extend_replaces_a_found_span_by_the_longer_surface_form_holding_it(span_model, kb_dir, tiny_encoder_dir, tmp_path):
    best, _, _ = span_model
    text = TEXTS[1][0] + " " + TEXTS[2][0]
    aliases = tmp_path / "aliases.json"
    srsly.write_json(aliases, {"zzz": {"D1": 1}})
    finder = {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best), "lexicon": str(aliases), "lexicon_floor": 0.0}
    config = {"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "vectors": PER_MENTION, "mentions": finder}
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config=config)
    doc = nlp(text)
    first = next(e for e in doc.ents if e.end < len(doc) and doc[e.end].text.isalpha())  # a found span with a word after it
    longer = doc[first.start : first.end + 1]
    srsly.write_json(aliases, {longer.text: {"D1": 1}})
    plain, extending = spacy.blank("en"), spacy.blank("en")
    plain.add_pipe("pel_linker", config=config)
    extending.add_pipe("pel_linker", config={**config, "mentions": {**finder, "lexicon_extend": True}})
    spans = lambda d: {(e.start, e.end) for e in d.ents}  # noqa: E731
    assert (first.start, first.end) in spans(plain(text)) and (longer.start, longer.end) not in spans(plain(text))
    assert (longer.start, longer.end) in spans(extending(text)) and (first.start, first.end) not in spans(extending(text))
    extending.to_disk(tmp_path / "p")  # the setting is the config's, saved with the pipeline
    assert (longer.start, longer.end) in spans(spacy.load(tmp_path / "p")(text))
    with pytest.raises(ValueError, match="lexicon_extend"):
        spacy.blank("en").add_pipe("pel_linker", config={"kb": str(kb_dir), "mentions": {**finder, "lexicon_extend": "yes"}})


def recorded_probabilities(monkeypatch) -> list:
    """The span probabilities each finder call selects from, in order."""
    seen = []
    real = mentions_module.select_spans
    monkeypatch.setattr(mentions_module, "select_spans", lambda s, e, p, t: seen.append(p) or real(s, e, p, t))
    return seen


def finder_pipeline(kb_dir, encoder_dir, model):
    """pel_linker finding its mentions with the span model(s) ``model``."""
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(encoder_dir), "vectors": PER_MENTION,
                                       "mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "model": model}})
    return nlp


def test_several_span_models_average_their_probabilities_and_travel_with_the_pipeline(span_model, kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    best, _, _ = span_model
    other = tmp_path / "other"  # a second span model: the same transformer, a scorer that says otherwise
    shutil.copytree(best, other)
    scorer = load_span_scorer(other / "span_scorer.safetensors")
    with torch.no_grad():
        for q in scorer.parameters():
            q.mul_(-1.0)
    save_span_scorer(scorer, other / "span_scorer.safetensors")
    seen = recorded_probabilities(monkeypatch)
    pipeline = lambda model: finder_pipeline(kb_dir, tiny_encoder_dir, model)  # noqa: E731
    text = TEXTS[0][0]
    single, flipped = pipeline(str(best)), pipeline(str(other))
    single(single.make_doc(text))
    flipped(flipped.make_doc(text))
    both = pipeline([str(best), str(other)])
    out = found(both(both.make_doc(text)))
    p_best, p_other, p_both = seen[-3:]
    assert abs(p_best - p_other).max() > 0.1  # the two models disagree …
    assert p_both == pytest.approx((p_best + p_other) / 2, abs=1e-5)  # … and the finder takes their mean
    finder = both.get_pipe("pel_linker").mentions
    assert finder.threshold == srsly.read_json(best / "span_report.json")["threshold"]  # γ of the first model
    # the members are saved in the pipeline: it finds the same spans once their folders are gone
    both.to_disk(tmp_path / "pipe")
    assert srsly.read_json(tmp_path / "pipe" / "pel_linker" / "span_members.json") == {"model": [str(best), str(other)],
                                                                                       "members": [str(other)]}
    shutil.rmtree(other)
    again = spacy.load(tmp_path / "pipe")
    assert found(again(again.make_doc(text))) == out and len(again.get_pipe("pel_linker").mentions.members) == 1
    with pytest.raises(ValueError, match="model"):  # spaCy's config check, before the finder's own
        pipeline([str(best), 3])
    with pytest.raises(ValueError, match="list of them"):
        mentions_module.span_finder_mentions(model=[str(best), ""])


def test_the_span_finder_never_finds_a_span_that_cuts_through_brackets(span_model, kb_dir, tiny_encoder_dir, monkeypatch):
    """A span model that likes long spans (every span's probability its length / 20): the longest spans
    it would keep greedily cut through `( HBV )`; the finder keeps only spans holding whole bracket pairs."""
    best, _, _ = span_model
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(tiny_encoder_dir), "vectors": PER_MENTION,
                                                "mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "model": str(best),
                                                             "threshold": 0.01, "max_span_len": 4}})
    nlp("warm up .")  # loads the span model
    scorer = linker.mentions.scorer
    monkeypatch.setattr(scorer, "probs", lambda H, starts, ends: torch.as_tensor((ends - starts) / 20.0))
    doc = nlp("Aspirin and hepatitis B virus ( HBV ) infection in lithium carbonate ( LC ) toxicity .")
    texts = [e.text for e in doc.ents]
    assert texts and all(t.count("(") == t.count(")") for t in texts), texts
    assert any("( HBV )" in t or t == "HBV" for t in texts)
