"""A name index given where a KB folder is wanted, or a KB folder where a name index is (``--reuse``, a
linker's ``kb``, ``build-names``' KB), is told in one line naming what it is."""
import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.retrieval.index import EntityIndex
from spacy_pel.retrieval.names import NameIndex, build_names
from tests.test_cli_errors import one_line_error


def run(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_name_index_and_a_kb_folder_given_for_each_other_are_named(kb_dir, kb_file, tmp_path, tiny_encoder_dir):
    """Defect: `build-kb --reuse NAMES` encoded everything, saying the name index was 'encoded at precision
    unrecorded'; `build-names --reuse KB` said 'name index format 2 is not 1'."""
    build_names(kb_dir, tmp_path / "names", progress=False)
    with pytest.raises(InputError, match="is a name index .*not a KB folder"):
        EntityIndex.from_disk(tmp_path / "names")
    with pytest.raises(InputError, match="is a KB folder .*not a name index"):
        NameIndex.from_disk(kb_dir)
    one_line_error(run("build-kb", "--kb", kb_file, "--format", "jsonl", "--encoder", tiny_encoder_dir,
                       "-o", tmp_path / "kb2", "--reuse", tmp_path / "names"), "is a name index")
    one_line_error(run("build-names", kb_dir, "-o", tmp_path / "names2", "--reuse", kb_dir), "is a KB folder")
    one_line_error(run("build-names", tmp_path / "names", "-o", tmp_path / "names3"), "is a name index")
    nlp = spacy.blank("en")
    nlp.add_pipe("pel_linker", config={"kb": str(tmp_path / "names")})
    with pytest.raises(InputError, match="is a name index"):
        nlp.initialize()
