"""Inputs and outputs as a user's file system has them: what a run's checkpoint depends on in a KB folder."""
import json

from spacy_pel.training.run_config import input_digests


def test_a_kb_folders_name_rows_and_hidden_files_do_not_make_a_checkpoint_stale(kb_dir):
    """``build-names KB`` writes ``KB/names`` (no trainer reads it): before, the KB folder's digest changed and
    the next ``train`` discarded its checkpoint ("a run that read other contents for paths.kb")."""
    raw = {"paths": {"kb": str(kb_dir)}}
    before = input_digests(raw)
    (kb_dir / "names").mkdir()
    (kb_dir / "names" / "meta.json").write_text(json.dumps({"kb_ids_sha256": "x"}), encoding="utf8")
    (kb_dir / "names" / "embeddings.npy").write_bytes(b"rows")
    (kb_dir / ".meta.json.tmp-123").write_text("a write in progress", encoding="utf8")
    assert input_digests(raw) == before
    (kb_dir / "notes").mkdir()  # any other folder is read as the KB's
    (kb_dir / "notes" / "x.txt").write_text("x", encoding="utf8")
    assert input_digests(raw) != before
