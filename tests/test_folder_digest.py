"""files.folder_digest: what tells one saved pipeline from another (bulk's completion markers)."""
import shutil

from spacy_pel.files import folder_digest


def test_a_copy_has_the_same_digest_and_any_change_another(tmp_path):
    folder = tmp_path / "pipeline"
    (folder / "pel_linker").mkdir(parents=True)
    (folder / "config.cfg").write_text("[nlp]\n")
    (folder / "pel_linker" / "weights.bin").write_bytes(b"\x00\x01" * 1000)
    digest = folder_digest(folder)
    shutil.copytree(folder, tmp_path / "copy")
    assert folder_digest(tmp_path / "copy") == digest  # another path, other mtimes: the same pipeline
    (folder / "pel_linker" / "weights.bin").write_bytes(b"\x00\x02" * 1000)
    assert folder_digest(folder) != digest
    shutil.copytree(tmp_path / "copy", tmp_path / "renamed")
    (tmp_path / "renamed" / "pel_linker" / "weights.bin").rename(tmp_path / "renamed" / "pel_linker" / "other.bin")
    assert folder_digest(tmp_path / "renamed") != digest  # the same bytes under another name
