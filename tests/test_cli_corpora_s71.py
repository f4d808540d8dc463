"""The less-used corpus commands: okb on a span with two gold mentions, convert's counts and id options on a
.spacy input, silver's swaps, and the outputs of aliases / label-types / silver that are one of their inputs."""
from __future__ import annotations

import random
from pathlib import Path

import pytest
import spacy
from spacy.tokens import DocBin, Span
from spacy.util import filter_spans
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.corpora import GOLD_KEY, NIL, gold_spans, read_docbin
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.evaluation.okb import relabel
from spacy_pel.kb import Entity
from spacy_pel.training.silver import NameMatcher, SilverStats, silver_doc

NLP = spacy.blank("en")
ROOT = Path(__file__).resolve().parents[1]


def test_okb_relabels_a_span_with_two_gold_mentions(tmp_path):
    # convert keeps both mentions of a span annotated with two types (one of them is an ent); okb relabelled
    # both as ents, which overlap: spaCy's E1010 traceback
    doc = NLP("Aspirin headache")
    doc.spans[GOLD_KEY] = [Span(doc, 0, 1, "Chemical", kb_id="D001"), Span(doc, 0, 1, "Drug", kb_id="D001"),
                           Span(doc, 1, 2, "Disease", kb_id="D003")]
    doc.ents = filter_spans(doc.spans[GOLD_KEY])
    counts = relabel([doc], {"D003"})
    assert counts == {"mentions": 3, "to_nil": 1, "partly_removed": 0}
    assert [(s.text, s.label_, s.kb_id_) for s in doc.spans[GOLD_KEY]] == [
        ("Aspirin", "Chemical", "D001"), ("Aspirin", "Drug", "D001"), ("headache", "Disease", NIL)]
    assert [(e.text, e.label_, e.kb_id_) for e in doc.ents] == [("Aspirin", "Chemical", "D001"), ("headache", "Disease", NIL)]


def test_convert_counts_overlapping_mentions_of_a_spacy_input(tmp_path):
    (tmp_path / "a.pubtator").write_text("300|t|Aspirin headache\n300|a|More fever.\n"
                                         "300\t0\t7\tAspirin\tChemical\tD001\n300\t0\t16\tAspirin headache\tDisease\tD003\n\n")
    first = convert_corpora([tmp_path / "a.pubtator"], tmp_path / "a.spacy")
    again = convert_corpora([tmp_path / "a.spacy"], tmp_path / "b.spacy")
    assert (first["mentions"], first["overlapping"]) == (2, 1)
    assert (again["mentions"], again["overlapping"]) == (2, 1)


def test_strip_prefix_and_id_map_keep_a_mention_without_an_id(tmp_path):
    doc = NLP("aspirin and fever")
    doc.ents = [Span(doc, 0, 1, "Chemical"), Span(doc, 2, 3, "Disease", kb_id="UMLS:D004")]
    db = DocBin(store_user_data=True)
    db.add(doc)
    db.to_disk(tmp_path / "in.spacy")
    stats = convert_corpora([tmp_path / "in.spacy"], tmp_path / "out.spacy", id_map={"C999": "D999"},
                            strip_id_prefixes=["UMLS:"])
    (out,) = read_docbin(NLP, tmp_path / "out.spacy")
    assert [(s.text, s.kb_id_) for s in gold_spans(out)] == [("aspirin", ""), ("fever", "D004")]  # "" is not NIL
    assert (stats["nil"], stats["prefix_stripped"], stats["remapped"]) == (0, {"UMLS:": 1}, {})


def test_silver_swap_is_never_the_same_name_in_another_case():
    entities = [Entity("D005", "dilated cardiomyopathy", [], ["Disease"]),
                Entity("D004", "fever", ["pyrexia"], ["Disease"])]
    matcher = NameMatcher(entities, stop_words=NLP.Defaults.stop_words)
    stats = SilverStats()
    doc = silver_doc(NLP, "Dilated cardiomyopathy was seen with fever.", matcher, 1.0, random.Random(0), stats)
    assert doc.text == "Dilated cardiomyopathy was seen with pyrexia."
    assert [(s.text, s.kb_id_) for s in gold_spans(doc)] == [("Dilated cardiomyopathy", "D005"), ("pyrexia", "D004")]
    assert (stats.mentions, stats.swapped) == (2, 1)


@pytest.mark.parametrize("command", [
    ["aliases", "{corpus}", "-o", "{corpus}"],
    ["label-types", "{corpus}", "--kb", "{kb}", "-o", "{corpus}"],
    ["label-types", "{corpus}", "--kb", "{kb}", "-o", "{cfg}", "--config", "{cfg}", "--config-out", "{out}"],
    ["label-types", "{corpus}", "--kb", "{kb}", "-o", "{out}", "--config", "{cfg}", "--config-out", "{cfg}"],
    ["label-types", "{corpus}", "--kb", "{kb}", "-o", "{out}", "--config", "{cfg}", "--config-out", "{out}"],
    ["silver", "{corpus}", "--kb", "{kb_file}", "-o", "{corpus}"],
])
def test_an_output_that_is_an_input_is_refused_before_any_write(tmp_path, kb_dir, kb_file, command):
    # each of these wrote over its input (the corpus, or the config before failing on it) with its own output
    (tmp_path / "c.pubtator").write_text("1|t|Aspirin and atrial flutter\n1|a|No warfarin.\n1\t0\t7\tAspirin\tChemical\tD4\n"
                                         "1\t12\t26\tatrial flutter\tDisease\tD3\n\n")
    paths = {"corpus": tmp_path / "c.spacy", "kb": kb_dir, "kb_file": kb_file, "cfg": tmp_path / "linker.cfg",
             "out": tmp_path / "out.cfg"}
    convert_corpora([tmp_path / "c.pubtator"], paths["corpus"])
    paths["cfg"].write_text((ROOT / "configs" / "linker_rules.cfg").read_text())
    before = {p: p.read_bytes() for p in paths.values() if p.is_file()}
    result = CliRunner().invoke(app, [str(a).format(**paths) for a in command])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and ("is one of the inputs" in lines[0]
                                                                  or "is --config-out too" in lines[0]), result.stderr
    assert {p: p.read_bytes() for p in paths.values() if p.is_file()} == before
    assert not paths["out"].exists()
