"""A KB folder missing a file is named as incomplete at load, not a bare FileNotFoundError (issue 32 item 4)."""
import shutil

import pytest

from spacy_pel.retrieval.index import EntityIndex, IncompleteKBError


def test_a_kb_without_its_vectors_is_named_incomplete(kb_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(kb_dir, broken)
    (broken / "embeddings.npy").unlink()
    with pytest.raises(IncompleteKBError, match=r"KB folder .*broken is incomplete: embeddings.npy is missing"):
        EntityIndex.from_disk(broken)
    assert len(EntityIndex.from_disk(kb_dir)) == 5  # the complete one loads
