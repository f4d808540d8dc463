"""``bulk`` with OUTPUT inside INPUT (``bulk corpus/ corpus/linked``): OUTPUT's own files (mentions/*.parquet,
errors/, done/ and the lock file) are no input. Before, a re-run read the first run's mentions/*.parquet as
new shards and linked them, and the run itself warned about OUTPUT.lock as an input file left out."""
import logging

import pytest

from spacy_pel.bulk.shards import find_shards

from .test_bulk_s69 import in_process, jsonl, link, pipelines  # noqa: F401 (fixtures)

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")


def test_output_inside_input_is_no_input_and_a_rerun_skips_every_shard(pipelines, in_process, tmp_path, caplog):  # noqa: F811
    corpus = tmp_path / "corpus"
    jsonl(corpus / "s1.jsonl", ("a1", "lithium carbonate and atrial flutter."))
    jsonl(corpus / "part" / "s2.jsonl", ("b1", "aspirin and warfarin were given."))
    out = corpus / "linked"
    with caplog.at_level(logging.WARNING):
        first = link(corpus, out, pipelines["ner"])
    assert (first["shards"], first["docs"]) == (2, 2)
    assert list((out / "mentions").glob("*.parquet"))  # the output a re-run must not read
    assert not [r for r in caplog.records if "left out" in r.getMessage()]  # not even OUTPUT.lock
    again = link(corpus, out, pipelines["ner"])
    assert (again["shards"], again["shards_skipped"], again["docs"]) == (2, 2, 2)
    assert [s.name for s in find_shards(corpus, leave_out=[out])] == ["part__s2.jsonl", "s1.jsonl"]
    assert len(find_shards(corpus)) > 2  # without leave_out, the output's parquet files are shards
