"""Session 73, bug02: a span-finder pipeline does not use the spans given in PubTator input (``link`` warns so), and
they no longer change what it finds: the document is built as raw text — its tokens not cut at the given boundaries,
the title/abstract boundary kept — in ``link`` and in a ``bulk`` worker."""
import json

import numpy as np
import spacy

from spacy_pel.bulk.local import link_file
from spacy_pel.bulk.shards import Shard, plan_chunks, read_chunk
from spacy_pel.bulk.worker import LinkWorker, build_doc
from spacy_pel.corpora import GOLD_KEY
from spacy_pel.models.doc_encoder import PASSAGES_KEY
from spacy_pel.models.span_scorer import SpanScorer
from tests.test_raw_text_s71 import _fake_probs, save_finder_pipeline

TITLE, ABSTRACT = "Atrial flutter followed lithium", "Lithiumcarbonate toxicity ."
ANNOTATION = f"7\t{len(TITLE) + 1}\t{len(TITLE) + 8}\tLithium\tChemical\tD1"  # cuts `Lithiumcarbonate` after `Lithium`


def found(path):
    return [(m["start_char"], m["end_char"]) for line in path.read_text(encoding="utf8").splitlines()
            for m in json.loads(line)["mentions"]]


def test_given_spans_a_span_finder_does_not_use_change_nothing_it_finds(kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    pipe = save_finder_pipeline(kb_dir, tiny_encoder_dir, tmp_path / "pipe")
    # the longest spans first: `lithium Lithiumcarbonate` (title + abstract) would be found but for the boundary
    monkeypatch.setattr(SpanScorer, "probs", _fake_probs(lambda st, en: 0.5 + 0.01 * (en - st)))
    raw, annotated = tmp_path / "raw.pubtator", tmp_path / "ann.pubtator"
    raw.write_text(f"7|t|{TITLE}\n7|a|{ABSTRACT}\n\n", encoding="utf8")
    annotated.write_text(f"7|t|{TITLE}\n7|a|{ABSTRACT}\n{ANNOTATION}\n\n", encoding="utf8")
    link_file(raw, tmp_path / "raw.jsonl", pipe, progress=False)
    link_file(annotated, tmp_path / "ann.jsonl", pipe, progress=False)
    spans = found(tmp_path / "ann.jsonl")
    assert spans and spans == found(tmp_path / "raw.jsonl")
    assert not [(a, b) for a, b in spans if a <= len(TITLE) < b], spans  # none crosses into the abstract
    assert (len(TITLE) + 8, len(TITLE) + 17) not in spans  # `carbonate`: a token the given span alone cut off
    # a bulk worker links the annotated shard's documents alike
    (chunk,) = plan_chunks(Shard(str(annotated), annotated.name, "pubtator"), 10)
    items = list(read_chunk(chunk.as_item()))
    assert items[0]["spans"]  # the shard has an annotation line: items with given spans
    (rows,) = LinkWorker(str(pipe)).link(items)
    assert [(r["start_char"], r["end_char"]) for r in rows] == spans
    assert np.all([r["kb_id"] for r in rows])


def test_a_doc_built_with_given_spans_keeps_the_title_abstract_boundary():
    """A linker of given spans beside a span finder (one per KB): the doc has the given spans and the passage start."""
    item = {"doc_id": "7", "text": f"{TITLE} {ABSTRACT}", "spans": json.dumps([[len(TITLE) + 1, len(TITLE) + 8, "Chemical"]]),
            "title_length": len(TITLE)}
    given, raw = build_doc(spacy.blank("en"), item), build_doc(spacy.blank("en"), item, given=False)
    assert [s.text for s in given.spans[GOLD_KEY]] == ["Lithium"] and "Lithiumcarbonate" in [t.text for t in raw]
    assert given.user_data[PASSAGES_KEY] == raw.user_data[PASSAGES_KEY] == [len(TITLE) + 1]
