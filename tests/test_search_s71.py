"""The bf16 KB search rescores its best rows in fp32 whatever the KB's size: also a KB, or a label's subset
of it, with no more rows than the candidates asked for."""
import numpy as np
import torch

from spacy_pel.retrieval.search import FlatSearch


def test_bf16_search_of_a_kb_no_larger_than_k_gives_exact_scores_and_order():
    """Defect: with k ≥ the KB's rows the bf16 products were returned as they were (steps of ~0.004, ties)."""
    matrix = torch.eye(3, dtype=torch.bfloat16)
    queries = np.array([[0.8250, 0.8260, 0.1]], np.float32)
    for k in (3, 10):
        scores, rows = FlatSearch(matrix).search(queries, k)
        assert rows.tolist() == [[1, 0, 2]]
        np.testing.assert_allclose(scores, [[0.8260, 0.8250, 0.1]], atol=1e-6)
    scores, rows = FlatSearch(matrix).subset(np.array([0, 1])).search(queries, 5)
    assert rows[0, :2].tolist() == [1, 0] and rows[0, 2:].tolist() == [-1, -1, -1]
    np.testing.assert_allclose(scores[0, :2], [0.8260, 0.8250], atol=1e-6)
