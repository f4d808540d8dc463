"""The int8 KB search (``auto`` on a CPU with VNNI and no bf16 units): int8 products only choose the rows
that are rescored, so a search answers as the float32 one does, for each query alone."""
import pickle

import numpy as np
import pytest
import torch

from spacy_pel.models import precision as precision_module
from spacy_pel.models.int8_blockwise import pack_int8_rows
from spacy_pel.models.precision import search_precision
from spacy_pel.retrieval import int8_screen, search
from spacy_pel.retrieval.int8_screen import Int8Screen, pack_in_chunks
from spacy_pel.retrieval.search import FlatSearch

CPU = torch.device("cpu")


def _unit_rows(n: int, dim: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _queries_near(kb: np.ndarray, rows: np.ndarray, seed: int) -> np.ndarray:
    """Queries close to some KB rows (as mention vectors are to their entities), not random directions."""
    noise = np.random.default_rng(seed).standard_normal((len(rows), kb.shape[1])).astype(np.float32)
    queries = kb[rows] + 0.6 * noise / np.sqrt(kb.shape[1])
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def test_chunked_packing_equals_packing_at_once(monkeypatch):
    matrix = _unit_rows(1000, 200, 0)  # 200: not a whole number of blocks
    monkeypatch.setattr(int8_screen, "PACK_ROWS", 96)  # chunks that do not divide the rows
    at_once = pack_int8_rows(matrix)
    for given in (matrix, torch.from_numpy(matrix)):
        packed, scales = pack_in_chunks(given)
        assert np.array_equal(packed, at_once[0]) and np.array_equal(scales, at_once[1])
    # a float16 tensor (how a screened search holds its vectors) packs as its float32 values
    half = torch.from_numpy(matrix).half()
    assert np.array_equal(pack_in_chunks(half)[0], pack_int8_rows(half.float().numpy())[0])


def test_screen_keeps_the_exact_best_rows_and_does_not_depend_on_the_batch(monkeypatch):
    kb = _unit_rows(5000, 128, 1)
    queries = _queries_near(kb, np.arange(0, 5000, 50), 2)
    screen = Int8Screen(kb)
    found = screen(queries, 64)
    assert found.shape == (len(queries), 64) and found.dtype == np.int64
    exact = np.argsort(-(queries @ kb.T), axis=1)[:, :10]
    assert all(set(e) <= set(f) for e, f in zip(exact, found))
    assert (found[:, 0] == exact[:, 0]).mean() > 0.9  # the int8 order itself is close, not only the set
    alone = np.concatenate([screen(queries[i : i + 1], 64) for i in range(len(queries))])
    assert np.array_equal(alone, found)
    screen.queries_per_call = 7  # calls split across queries answer the same
    assert np.array_equal(screen(queries, 64), found)
    assert screen(queries[:2], 10_000).shape == (2, 5000)  # depth beyond the rows: all rows


def test_screened_search_answers_as_the_float32_search(monkeypatch):
    monkeypatch.setattr(search, "SCREEN_DEPTH", 32)
    monkeypatch.setattr(search, "RESCORE_QUERIES", 16)  # several rescoring chunks
    kb = torch.from_numpy(_unit_rows(4000, 96, 3)).half()  # a KB's vectors are saved in float16
    queries = _queries_near(kb.float().numpy(), np.arange(0, 4000, 40), 4)
    plain = FlatSearch(kb.float())
    screened = FlatSearch(kb, screened=True)
    want_scores, want_rows = plain.search(queries, 10)
    scores, rows = screened.search(queries, 10)
    assert screened._screen is not None  # the int8 path was taken
    assert np.array_equal(rows, want_rows)
    np.testing.assert_allclose(scores, want_scores, atol=1e-5)  # the exact products, not int8 ones
    # a larger k is screened deeper (4 k: the order of a top-40 holds to its last row); a tiny matrix is
    # searched without a screen
    assert np.array_equal(screened.search(queries, 40)[1], plain.search(queries, 40)[1])
    tiny = FlatSearch(kb[:20], screened=True)
    assert np.array_equal(tiny.search(queries, 5)[1], FlatSearch(kb[:20].float()).search(queries, 5)[1])
    assert tiny._screen is None


def test_added_rows_and_subsets_are_screened_too():
    kb = _unit_rows(3000, 64, 5)
    screened = FlatSearch(torch.from_numpy(kb).half(), screened=True)
    screened.search(kb[:3], 5)
    new = _unit_rows(10, 64, 6)
    screened.add(new)  # a screen made before the rows were added would never find them
    assert screened.search(new, 1)[1][:, 0].tolist() == list(range(3000, 3010))
    subset = screened.subset(np.arange(1000, 3000))
    assert subset.flat.screened
    assert subset.search(kb[[1500, 2500]], 1)[1][:, 0].tolist() == [1500, 2500]
    back = pickle.loads(pickle.dumps(screened))  # n_process workers: each makes its own screen
    assert back.screened and back._screen is None
    assert back.search(new[:2], 1)[1][:, 0].tolist() == [3000, 3001]


def test_storage_follows_the_search_precision(monkeypatch):
    kb = _unit_rows(100, 32, 7)
    monkeypatch.setattr(search, "search_precision", lambda precision, device: "int8")
    int8 = FlatSearch.from_array(kb, "auto")
    assert int8.matrix.dtype == torch.float16 and int8.screened
    monkeypatch.setattr(search, "search_precision", lambda precision, device: "fp32")
    fp32 = FlatSearch.from_array(kb, "auto")
    assert fp32.matrix.dtype == torch.float32 and not fp32.screened


@pytest.mark.parametrize("bf16,vnni,asked,device,want", [
    (False, True, "auto", "cpu", "int8"),   # a VNNI CPU without bf16 units: int8 screen
    (True, True, "auto", "cpu", "bf16"),    # bf16 units: bf16 (an int8 screen measured no faster there)
    (False, False, "auto", "cpu", "fp32"),  # neither
    (True, True, "fp32", "cpu", "fp32"),    # asked for: kept
    (True, True, "int8", "cpu", "int8"),
    (False, False, "int8_dynamic", "cpu", "int8"),
])
def test_search_precision(monkeypatch, bf16, vnni, asked, device, want):
    monkeypatch.setattr(precision_module, "cpu_has_bf16", lambda: bf16)
    monkeypatch.setattr(precision_module, "cpu_has_vnni", lambda: vnni)
    assert search_precision(asked, torch.device(device)) == want


def test_a_matrix_beyond_one_shard_is_screened_in_shards(monkeypatch):
    monkeypatch.setattr(int8_screen, "SHARD_ROWS", 1000)  # an ONNX model holds at most 2 GB: big KBs are split
    kb = torch.from_numpy(_unit_rows(2600, 64, 8)).half()
    queries = _queries_near(kb.float().numpy(), np.arange(0, 2600, 13), 9)
    screen = Int8Screen(kb)
    assert [rows for _, rows, _ in screen.shards] == [1000, 1000, 600]
    found = screen(queries, 40)
    assert found.shape == (len(queries), 120) and found.min() >= 0 and found.max() < 2600
    assert all(len(set(f)) == 120 for f in found)  # each shard's own rows, offset to the matrix's numbering
    exact = np.argsort(-(queries @ kb.float().numpy().T), axis=1)[:, :10]
    assert all(set(e) <= set(f) for e, f in zip(exact, found))
    screened = FlatSearch(kb, screened=True)
    assert np.array_equal(screened.search(queries, 10)[1], FlatSearch(kb.float()).search(queries, 10)[1])
