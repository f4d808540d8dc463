"""A linker across threads and processes (session 72's probe of concurrency, /tmp/hZ): ONNX Runtime copies of
the towers (``int8``, ``onnx_fp32``) do not stop a pipeline from pickling (``copy.deepcopy``, spaCy's
``n_process`` with spawn); they follow torch's thread setting when it changes; and two threads making their
first copies at once do not race in ``torch.onnx.export``'s process-wide state."""
import copy
import pickle
import threading

import pytest
import spacy
import torch
from spacy.tokens import Span

pytestmark = pytest.mark.filterwarnings("ignore:pel_linker. this pipeline has no NIL threshold")


def pipeline(kb_dir, precision):
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "precision": precision})
    nlp.initialize()
    return nlp


def linked(nlp, text="Aspirin was given ."):
    doc = nlp.make_doc(text)
    doc.ents = [Span(doc, 0, 1, "Chemical")]
    doc = nlp(doc)
    return [(e.kb_id_, [round(c[2], 5) for c in e._.pel_candidates]) for e in doc.ents]


def onnx_towers(nlp):
    return [made for _, made in nlp.get_pipe("pel_linker").encoder._runtime.values()]


@pytest.mark.parametrize("precision", ["int8", "onnx_fp32"])
def test_a_pipeline_that_has_linked_in_onnx_runtime_pickles_and_links_the_same(kb_dir, precision):
    nlp = pipeline(kb_dir, precision)
    before = linked(nlp)
    assert onnx_towers(nlp)  # an ONNX Runtime session is held: what pickle could not take
    for other in (pickle.loads(pickle.dumps(nlp)), copy.deepcopy(nlp)):
        assert linked(other) == before


def test_the_onnx_tower_follows_a_change_of_torchs_threads(kb_dir):
    nlp = pipeline(kb_dir, "int8")
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        first = linked(nlp)
        torch.set_num_threads(1)
        assert linked(nlp) == first
        towers = onnx_towers(nlp)
        assert [t.session.get_session_options().intra_op_num_threads for t in towers] == [1]  # one copy, 1 thread
    finally:
        torch.set_num_threads(threads)


def test_two_threads_making_their_first_onnx_copies_at_once_both_link(kb_dir):
    nlps = [pipeline(kb_dir, "int8") for _ in range(2)]
    barrier, results, errors = threading.Barrier(2), {}, []

    def work(i):
        barrier.wait()
        try:
            results[i] = linked(nlps[i])
        except Exception as err:  # noqa: BLE001 — the failure is the finding
            errors.append(repr(err))

    for _ in range(2):  # the race is not certain in one round
        for nlp in nlps:
            nlp.get_pipe("pel_linker").encoder._runtime.clear()
        threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and results[0] == results[1]
