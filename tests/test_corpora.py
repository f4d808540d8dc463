import pytest
import spacy

from spacy_pel.corpora import (
    GOLD_KEY,
    CorpusFormatError,
    convert,
    make_doc,
    read_docbin,
    read_pubtator,
)
from spacy_pel.corpus_formats import convert_corpora
from spacy_pel.files import InputError

from .conftest import shared

SAMPLE = """23949582|t|Hemorrhagic cystitis after bevacizumab.
23949582|a|Famotidine-induced delirium and lithium-carbonate toxicity.
23949582\t0\t20\tHemorrhagic cystitis\tDisease\tD006470|D003556\tHemorrhagic|cystitis
23949582\t27\t38\tbevacizumab\tChemical\t-1
23949582\t40\t50\tFamotidine\tChemical\tD015738
23949582\t59\t67\tdelirium\tDisease\tD003693
23949582\t72\t79\tlithium\tChemical\tD008094
23949582\tCID\tD015738\tD003693

"""


def test_read_pubtator_and_make_doc(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text(SAMPLE, encoding="utf8")
    (pdoc,) = read_pubtator(path)
    assert pdoc.text.startswith("Hemorrhagic cystitis after bevacizumab. Famotidine")
    doc = make_doc(spacy.blank("en"), pdoc)
    ents = [(e.text, e.label_, e.kb_id_) for e in doc.ents]
    assert ents == [
        ("Hemorrhagic cystitis", "Disease", "D006470|D003556"),
        ("bevacizumab", "Chemical", "NIL"),
        ("Famotidine", "Chemical", "D015738"),
        ("delirium", "Disease", "D003693"),
        ("lithium", "Chemical", "D008094"),  # inside "lithium-carbonate": tokens are split to fit
    ]
    assert doc.text == pdoc.text and len(doc.spans[GOLD_KEY]) == 5


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("23949582\t0\t20\tHemorrhagic cystitix\tDisease\tD1", "give 'Hemorrhagic cystitis', not"),
        ("23949582\t0\t999\tX\tDisease\tD1", "outside the text"),
        ("23949582\t0\tx\tX\tDisease\tD1", "must be integers"),
        ("23949582\t0\t20\tHemorrhagic cystitis", "expected PMID"),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, fragment):
    path = tmp_path / "bad.txt"
    path.write_text(SAMPLE.splitlines()[0] + "\n" + SAMPLE.splitlines()[1] + "\n" + line + "\n", encoding="utf8")
    with pytest.raises(CorpusFormatError) as err:
        read_pubtator(path)
    assert f"{path}:3:" in str(err.value) and fragment in str(err.value)


def test_bc5cdr_dev_offsets_exact(tmp_path):
    """Every BC5CDR dev mention converts to a span with exactly the gold text and ids."""
    source = shared("bc5cdr", "CDR_DevelopmentSet.PubTator.txt")
    stats = convert(source, tmp_path / "dev.spacy")
    docs = read_docbin(spacy.blank("en"), tmp_path / "dev.spacy")
    gold = {(p.pmid, a.start, a.end): a for p in read_pubtator(source) for a in p.annotations}
    seen = 0
    for doc in docs:
        for span in doc.spans[GOLD_KEY]:
            ann = gold[(doc.user_data["pmid"], span.start_char, span.end_char)]
            assert span.text == ann.text and span.kb_id_ == ann.kb_id and span.label_ == ann.type
            seen += 1
        assert [(e.start_char, e.end_char, e.kb_id_) for e in doc.ents] == [
            (s.start_char, s.end_char, s.kb_id_) for s in doc.spans[GOLD_KEY]
        ]
    assert seen == len(gold) == 9591 == stats["mentions"]
    assert stats["unaligned"] == 0 and stats["nil"] == 59 and stats["docs"] == 500


def test_ncbi_plus_separated_composites(tmp_path):
    stats = convert(shared("ncbi-disease", "NCBIdevelopset_corpus.txt"), tmp_path / "ncbi.spacy")
    docs = read_docbin(spacy.blank("en"), tmp_path / "ncbi.spacy")
    ids = [e.kb_id_ for d in docs for e in d.ents]
    assert stats["unaligned"] == 0 and len(ids) == stats["mentions"]
    assert all("+" not in i and " " not in i for i in ids)
    assert sum("|" in i for i in ids) == stats["composite"] > 0


def test_convert_labels_keeps_those_types_and_counts_the_rest(tmp_path):
    """``convert --labels Disease`` (BC5CDR's diseases beside a disease corpus): the other types are left
    out and counted, in PubTator and in ``.spacy`` inputs alike; a filter no mention passes writes nothing."""
    path = tmp_path / "c.txt"
    path.write_text(SAMPLE, encoding="utf8")
    stats = convert_corpora([path], tmp_path / "d.spacy", labels=["Disease"])
    assert stats["mentions"] == 2 and stats["left_out_by_label"] == {"Chemical": 3}
    (doc,) = read_docbin(spacy.blank("en"), tmp_path / "d.spacy")
    assert [(e.text, e.label_) for e in doc.ents] == [("Hemorrhagic cystitis", "Disease"), ("delirium", "Disease")]
    assert [s.label_ for s in doc.spans[GOLD_KEY]] == ["Disease", "Disease"]
    convert_corpora([path], tmp_path / "all.spacy")  # a .spacy input is filtered the same way
    again = convert_corpora([tmp_path / "all.spacy"], tmp_path / "d2.spacy", labels=["Disease"])
    assert again["mentions"] == 2 and again["left_out_by_label"] == {"Chemical": 3}
    (doc2,) = read_docbin(spacy.blank("en"), tmp_path / "d2.spacy")
    assert [(e.text, e.kb_id_) for e in doc2.ents] == [(e.text, e.kb_id_) for e in doc.ents]
    with pytest.raises(InputError, match="no mention has a type in labels"):
        convert_corpora([path], tmp_path / "none.spacy", labels=["Gene"])
    assert not (tmp_path / "none.spacy").exists()
