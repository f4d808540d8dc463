"""Raw text linked end to end: characters the transformer never sees (a BOM, a zero-width space, a soft hyphen,
a word joiner, a lone combining accent: spaCy tokens without word pieces) count as whitespace for the span finder
and its trainer; no found mention of raw PubTator input crosses from the title into the abstract (spans found,
propagated, in ``link`` and in a ``bulk`` worker); a JSON line whose id or text holds a lone surrogate is a
malformed line (``FILE:LINE``, or skipped and counted)."""
import json
from pathlib import Path

import bioc
import numpy as np
import pytest
import spacy
import torch
from typer.testing import CliRunner

from spacy_pel.bulk.local import link_file
from spacy_pel.bulk.shards import Shard, plan_chunks, read_chunk
from spacy_pel.bulk.worker import LinkWorker
from spacy_pel.cli.link import app
from spacy_pel.evaluation.evaluators import DocExample
from spacy_pel.files import InputError
from spacy_pel.models.doc_encoder import encode_docs
from spacy_pel.models.encoder import BiEncoder
from spacy_pel.models.span_scorer import SpanScorer, save_span_scorer
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.training.span_scorer import span_examples

PLAIN = "Aspirin and warfarin were given ."
INVISIBLE_TEXTS = ["\ufeff Aspirin and warfarin were given .",  # a BOM first: whatever is found starts on a word
                   "Aspirin \u200b and \u00ad warfarin were \u2060 given .", "Aspirin and \u0301 warfarin were given ."]
INVISIBLE = set("\ufeff\u200b\u00ad\u2060\u0301")
TITLE, ABSTRACT = "Lithium", "carbonate toxicity . Lithium carbonate is given ."  # a title without a full stop


def save_finder_pipeline(kb_dir: Path, encoder_dir: Path, path: Path, kind: str = "span", propagate: bool = False) -> Path:
    """pel_linker with a span finder whose scorer (over the linker's tiny transformer) gives every single-word
    span p > 0.5 from its bias, its weights adding little: whatever is left unfound is left out by enumeration."""
    torch.manual_seed(0)
    scorer = SpanScorer(32, kind=kind)
    with torch.no_grad():
        for p in scorer.parameters():
            p.mul_(0.05)
        if kind == "span":
            scorer.w_s.bias.fill_(4.0)
        else:
            scorer.w_tag.bias.copy_(torch.tensor([0.0, 3.0, -3.0]))  # O, B, I
    save_span_scorer(scorer, path.parent / f"{path.name}_scorer.safetensors")
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "encoder": str(encoder_dir), "device": "cpu", "precision": "fp32",
                                       "mentions": {"@misc": "spacy_pel.mentions.span_finder.v1", "threshold": 0.5,
                                                    "scorer": str(path.parent / f"{path.name}_scorer.safetensors"),
                                                    "max_span_len": 3, "propagate": propagate}})
    nlp("warm up .")
    nlp.to_disk(path)
    return path


def visible(text: str) -> str:
    return " ".join("".join(c for c in text if c not in INVISIBLE).split())


def words(doc):
    """Token index → word index (whitespace and characters without word pieces: None)."""
    out, k = [], 0
    for t in doc:
        word = not t.is_space and not set(t.text) <= INVISIBLE
        out.append(k if word else None)
        k += word
    return out


@pytest.mark.parametrize("kind", ["span", "bio"])
def test_tokens_without_word_pieces_neither_start_nor_end_a_found_span_nor_are_one(kb_dir, tiny_encoder_dir, tmp_path, kind):
    nlp = spacy.load(save_finder_pipeline(kb_dir, tiny_encoder_dir, tmp_path / "pipe", kind))
    docs = [nlp.make_doc(t) for t in [PLAIN, *INVISIBLE_TEXTS]]
    encoder = BiEncoder.from_pretrained(tiny_encoder_dir)
    for doc, H in zip(docs, encode_docs(encoder, docs)):  # what the contract is about: tokens with zero vectors
        assert all(not H[t.i].any() for t in doc if set(t.text) <= INVISIBLE)
    found = []
    for doc in nlp.pipe([d.text for d in docs]):
        where = words(doc)
        assert all(where[e.start] is not None and where[e.end - 1] is not None for e in doc.ents), \
            [(e.text, e.start_char) for e in doc.ents]
        found.append([(where[e.start], where[e.end - 1] + 1, e.start_char, e.end_char) for e in doc.ents])
    for doc, spans in zip(docs, found):
        assert [s[:2] for s in spans] == [s[:2] for s in found[0]]  # the same words as the plain text
        assert [visible(doc.text[a:b]) for *_, a, b in spans] == [PLAIN[a:b] for *_, a, b in found[0]]  # at their offsets
    # the trainer enumerates the spans the finder does: none has an edge without word pieces
    examples, _ = span_examples(encoder, docs, 3)
    plain = set(zip(examples[0].starts.tolist(), examples[0].ends.tolist()))
    for doc, ex in zip(docs, examples):
        where = words(doc)
        assert {(where[a], where[b - 1] + 1) for a, b in zip(ex.starts.tolist(), ex.ends.tolist())} == plain


def _fake_probs(wanted):
    """SpanScorer.probs replaced: ``wanted(starts, ends)`` → probabilities."""
    def probs(self, H, starts, ends):
        st, en = np.asarray(starts), np.asarray(ends)
        return torch.as_tensor(wanted(st, en), dtype=torch.float32)
    return probs


def _crossing(rows, title_length):
    return [r for r in rows if r[0] < title_length + 1 and r[1] > title_length]


def test_no_found_or_propagated_mention_crosses_the_title_abstract_boundary(kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    pipe = save_finder_pipeline(kb_dir, tiny_encoder_dir, tmp_path / "pipe", propagate=True)
    corpus = tmp_path / "in.pubtator"
    corpus.write_text(f"7|t|{TITLE}\n7|a|{ABSTRACT}\n\n", encoding="utf8")
    # the longest spans first: `Lithium carbonate toxicity` (title + abstract) would be the first found
    monkeypatch.setattr(SpanScorer, "probs", _fake_probs(lambda st, en: 0.5 + 0.01 * (en - st)))
    link_file(corpus, tmp_path / "out.xml", pipe, progress=False)
    (document,) = bioc.biocxml.load(open(tmp_path / "out.xml", encoding="utf8")).documents
    assert [p.offset for p in document.passages] == [0, len(TITLE) + 1]
    located = [(p, a.locations[0]) for p in document.passages for a in p.annotations]
    assert located and all(p.offset <= loc.offset and loc.end <= p.offset + len(p.text) for p, loc in located), \
        [(p.offset, loc.offset, loc.end) for p, loc in located]
    # a bulk worker links the shard's raw PubTator documents alike
    (chunk,) = plan_chunks(Shard(str(corpus), corpus.name, "pubtator"), 10)
    items = list(read_chunk(chunk.as_item()))
    (rows,) = LinkWorker(str(pipe)).link(items)
    assert rows and not _crossing([(r["start_char"], r["end_char"]) for r in rows], len(TITLE))
    # only `Lithium carbonate` in the abstract (tokens 4-6) is found: propagation would add the title's `Lithium` +
    # the abstract's `carbonate` (tokens 0-2)
    monkeypatch.setattr(SpanScorer, "probs", _fake_probs(lambda st, en: np.where((st == 4) & (en == 6), 0.9, 0.1)))
    link_file(corpus, tmp_path / "out.jsonl", pipe, progress=False)
    (linked,) = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf8").splitlines()]
    spans = [(m["start_char"], m["end_char"]) for m in linked["mentions"]]
    assert spans == [(len(TITLE) + 22, len(TITLE) + 39)], spans  # "Lithium carbonate" of the abstract alone


def test_a_json_line_holding_a_lone_surrogate_is_a_malformed_line(kb_dir, tiny_encoder_dir, tmp_path):
    pipe = save_finder_pipeline(kb_dir, tiny_encoder_dir, tmp_path / "pipe")
    corpus = tmp_path / "in.jsonl"  # valid JSON: \ud800 is an escape json.loads returns as is
    corpus.write_text('{"id": "a", "text": "Aspirin and warfarin were given ."}\n'
                      '{"id": "b", "text": "Aspirin \\ud800 and warfarin ."}\n'
                      '{"id": "c\\udfff", "text": "Warfarin ."}\n', encoding="utf8")
    with pytest.raises(InputError, match=rf"^{corpus}:2: text holds a lone surrogate \(U\+D800\) at character 8"):
        link_file(corpus, tmp_path / "out.jsonl", pipe, progress=False)
    result = CliRunner().invoke(app, [str(corpus), str(tmp_path / "out.jsonl"), "--pipeline", str(pipe), "--no-progress"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert [line for line in result.stderr.splitlines() if line.strip()] == \
        [f"error: {corpus}:2: text holds a lone surrogate (U+D800) at character 8: not valid Unicode, UTF-8 cannot encode it"]
    stats = link_file(corpus, tmp_path / "out.jsonl", pipe, skip_bad_lines=True, progress=False)
    assert stats["docs"] == 1 and stats["skipped_lines"] == 2
    assert stats["skipped_examples"][1].startswith(f"{corpus}:3: id holds a lone surrogate (U+DFFF) at character 1")
    # a bulk shard: the two documents are errors (the errors file takes them: their ids are UTF-8)
    (chunk,) = plan_chunks(Shard(str(corpus), corpus.name, "jsonl"), 10)
    items = list(read_chunk(chunk.as_item()))
    assert [bool(i["error"]) for i in items] == [False, True, True]
    assert [i["doc_id"] for i in items] == ["a", "b", f"{corpus}:3"]


def test_the_joint_trainer_enumerates_no_span_edged_by_a_token_without_word_pieces(kb_dir, tiny_encoder_dir):
    """Defect: train-e2e's documents (DocExample) listed spans starting or ending on a BOM or a zero-width space,
    which the span finder never lists: negatives and the threshold were chosen over spans inference cannot find."""
    nlp = spacy.blank("en")
    tokenizer = BiEncoder.from_pretrained(tiny_encoder_dir).tokenizer
    index = EntityIndex.from_disk(kb_dir)
    docs = [nlp.make_doc(t) for t in [PLAIN, *INVISIBLE_TEXTS]]
    plain = DocExample(docs[0], index, 3, tokenizer)
    expected = set(zip(plain.starts.tolist(), plain.ends.tolist()))
    for doc in docs[1:]:
        ex, where = DocExample(doc, index, 3, tokenizer), words(doc)
        assert {(where[a], where[b - 1] + 1) for a, b in zip(ex.starts.tolist(), ex.ends.tolist())} == expected
