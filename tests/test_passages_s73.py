"""A PubTator title and abstract are two passages all the way: ``convert`` keeps where the abstract begins in
the .spacy corpus, so that ``evaluate --e2e`` / ``calibrate --e2e`` (the text as a user gives it) and ``link`` of
the .spacy file see the same boundary ``link`` of the PubTator file does — no found mention crosses it — and a
.spacy corpus linked into PubTator keeps its title line (session 73: the boundary was lost in conversion)."""
import spacy

from spacy_pel.bulk.local import link_file
from spacy_pel.corpora import PASSAGES_KEY, bare_doc, raw_doc, read_docbin, read_pubtator
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.models.doc_encoder import within_passages

from .test_link_files import PUBTATOR, pipelines, write  # noqa: F401 (pipelines: a fixture)


def test_convert_keeps_the_abstracts_start_and_raw_docs_carry_it(tmp_path):
    convert_corpora([write(tmp_path / "in.txt", PUBTATOR)], tmp_path / "in.spacy")
    nlp = spacy.blank("en")
    docs = read_docbin(nlp, tmp_path / "in.spacy")
    titles = [d.title_length for d in read_pubtator(tmp_path / "in.txt")]
    assert [list(d.user_data.get(PASSAGES_KEY, ())) for d in docs] == [[n + 1] for n in titles]
    for doc in (raw_doc(nlp, docs[0]), bare_doc(docs[0])):
        assert doc.user_data[PASSAGES_KEY] == [titles[0] + 1] and not doc.ents
        # a span from the title's last word into the abstract's first is cut; one inside the title is not
        last, first = doc.char_span(titles[0] - 8, titles[0]), doc.char_span(titles[0] + 1, titles[0] + 2, alignment_mode="expand")
        keep = within_passages(doc, [last.start, last.start], [first.end, last.end])
        assert keep.tolist() == [False, True]



def test_links_jsonl_output_keeps_the_title_length_for_convert(pipelines, tmp_path):  # noqa: F811
    """A .spacy corpus linked into .jsonl and converted back lost where the abstract begins (/tmp/hJJ bug03)."""
    corpus = write(tmp_path / "in.txt", PUBTATOR)
    convert_corpora([corpus], tmp_path / "in.spacy")
    link_file(tmp_path / "in.spacy", tmp_path / "out.jsonl", pipelines[1], progress=False)
    convert_corpora([tmp_path / "out.jsonl"], tmp_path / "back.spacy")
    titles = [d.title_length for d in read_pubtator(corpus)]
    back = read_docbin(spacy.blank("en"), tmp_path / "back.spacy")
    assert [list(d.user_data.get(PASSAGES_KEY, ())) for d in back] == [[n + 1] for n in titles]


def test_the_span_finder_alone_finds_no_span_across_the_abstracts_start(kb_dir, tiny_encoder_dir, tmp_path, monkeypatch):
    """Without propagation or a lexicon (the default finder), the spans the scorer rates best, the longest,
    run from the title into the abstract: the finder's first filter leaves them out before it selects."""
    from spacy_pel.corpora import PASSAGES_KEY as KEY
    from spacy_pel.models.span_scorer import SpanScorer

    from .test_raw_text_s71 import ABSTRACT, TITLE, _crossing, _fake_probs, save_finder_pipeline

    nlp = spacy.load(save_finder_pipeline(kb_dir, tiny_encoder_dir, tmp_path / "pipe", propagate=False))
    finder = nlp.get_pipe("pel_linker").mentions
    assert not finder.propagate and not finder.lexicon
    monkeypatch.setattr(SpanScorer, "probs", _fake_probs(lambda st, en: 0.5 + 0.01 * (en - st)))
    doc = nlp.make_doc(f"{TITLE} {ABSTRACT}")
    unmarked = [(e.start_char, e.end_char) for e in nlp(nlp.make_doc(doc.text)).ents]
    assert _crossing(unmarked, len(TITLE)), unmarked  # a doc without the boundary: the best span crosses it
    doc.user_data[KEY] = [len(TITLE) + 1]
    found = [(e.start_char, e.end_char) for e in nlp(doc).ents]
    assert found and not _crossing(found, len(TITLE)), found
    assert found[0] == (0, len(TITLE))  # the title's word alone
