"""``retarget`` in a pipeline with one pel_linker per KB, and what the name rows are searched in.

Defects: ``retarget`` rewrote the first of several pel_linkers only, said nothing, and had no ``--linker``
(``evaluate`` and ``calibrate`` have one); docs/configuration.md said the name rows' own search resolves
``auto`` "the same way" as ``search_precision``, which they never follow.
"""
from pathlib import Path

import numpy as np
import pytest
import spacy
from typer.testing import CliRunner

from spacy_pel.cli import app
from spacy_pel.files import InputError
from spacy_pel.pipeline.aliases import write_aliases
from spacy_pel.pipeline.linker import configure_linker, find_linker
from spacy_pel.pipeline.retarget import retarget
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.names import build_names
from spacy_pel.retrieval.search import FlatSearch

DOCS = Path(__file__).resolve().parents[1] / "docs"
NEW_KB = ['{"id": "H1", "name": "heart failure", "types": ["Disease"]}',
          '{"id": "H2", "name": "metformin", "types": ["Chemical"]}']
LABELS = {"chem": "Chemical", "dis": "Disease"}


@pytest.fixture
def two_linkers(kb_dir, tiny_encoder_dir, tmp_path):
    """A saved pipeline with one pel_linker per label (both over the conftest KB), and a new KB of the same encoder."""
    nlp = spacy.blank("en")
    for name, label in LABELS.items():
        nlp.add_pipe("pel_linker", name=name, config={"kb": str(kb_dir), "threshold": 0.0, "mentions": {
            "@misc": "spacy_pel.mentions.ents.v1", "labels": [label]}})
    nlp.to_disk(tmp_path / "pipeline")
    (tmp_path / "new.jsonl").write_text("\n".join(NEW_KB) + "\n", encoding="utf8")
    build_kb(tmp_path / "new.jsonl", tmp_path / "new_kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return tmp_path / "pipeline", tmp_path / "new_kb"


def _one_error_line(result) -> str:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = [ln for ln in result.stderr.strip().splitlines() if not ln.startswith("warning: ")]  # spacy.load's
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_several_linkers_need_linker_and_the_others_keep_their_kb(two_linkers, kb_dir, tmp_path):
    pipeline, new_kb = two_linkers
    runner = CliRunner()
    out = tmp_path / "out"
    line = _one_error_line(runner.invoke(app, ["retarget", str(pipeline), "--kb", str(new_kb), "-o", str(out)]))
    assert "2 pel_linkers (chem, dis)" in line and "--linker" in line
    assert not out.exists()
    line = _one_error_line(runner.invoke(app, ["retarget", str(pipeline), "--kb", str(new_kb), "-o", str(out),
                                               "--linker", "drugs"]))
    assert "no pel_linker called 'drugs'" in line and "chem, dis" in line
    assert not out.exists()
    with pytest.raises(InputError, match="--linker"):
        retarget(pipeline, new_kb, out)

    result = runner.invoke(app, ["retarget", str(pipeline), "--kb", str(new_kb), "-o", str(out), "--linker", "dis"])
    assert result.exit_code == 0, result.output
    assert "components.dis.kb" in result.stdout and "components.chem" not in result.stdout
    nlp = spacy.load(out)
    assert nlp.config["components"]["dis"]["kb"] == str(new_kb)
    assert nlp.config["components"]["chem"]["kb"] == str(kb_dir)
    ids = {}
    for name in LABELS:
        linker = find_linker(nlp, name)[1]
        linker.ensure_loaded()
        ids[name] = list(linker.index.entities.ids)
    assert ids == {"dis": ["H1", "H2"], "chem": ["D1", "D2", "D3", "D4", "D5"]}
    # the library call too: the other linker, by name
    _, overrides = retarget(pipeline, new_kb, tmp_path / "out_chem", linker="chem")
    assert set(overrides) == {"components.chem.kb"}


# ------------------------------------------------------------------ bug07: the name rows' search precision
def _storage(searcher: FlatSearch):
    return searcher.matrix.dtype, searcher.screened


def test_name_rows_are_searched_as_auto_resolves_whatever_search_precision_and_the_docs_say_so(kb_dir, tmp_path):
    """The name rows (name_rows with search, alias_rows) hold their vectors as ``auto`` resolves, at creation,
    after configure_linker and at load, whatever ``search_precision`` says; docs/configuration.md must say
    that (it said they resolve ``auto`` "the same way"). Should the name rows ever follow the setting, this
    test fails and the docs change with the code."""
    auto = _storage(FlatSearch.from_array(np.zeros((2, 4), np.float32), "auto"))
    other = "fp32" if auto[1] else "int8"  # a setting whose storage is not auto's here
    assert _storage(FlatSearch.from_array(np.zeros((2, 4), np.float32), other)) != auto
    build_names(kb_dir, tmp_path / "names", progress=False)
    write_aliases({"valve leak": {"D2": 3}, "heart flutter": {"D3": 1}}, tmp_path / "aliases.json")
    rules = {"names": {"@misc": "spacy_pel.rules.name_rows.v1", "names": str(tmp_path / "names"), "search": True},
             "forms": {"@misc": "spacy_pel.rules.alias_rows.v1", "aliases": str(tmp_path / "aliases.json")}}
    nlp = spacy.blank("en")
    linker = nlp.add_pipe("pel_linker", config={"kb": str(kb_dir), "threshold": 0.0, "search_precision": other,
                                                "rules": rules})
    linker.ensure_loaded()

    def held(linker):
        return {key: _storage(linker.rules[key].names.searcher) for key in rules}

    assert _storage(linker.index.searcher) != auto  # the KB follows the setting
    assert held(linker) == {"names": auto, "forms": auto}
    configure_linker(nlp, search_precision="fp32" if other == "int8" else "int8")
    assert held(linker) == {"names": auto, "forms": auto}
    nlp.to_disk(tmp_path / "pipeline")
    loaded = find_linker(spacy.load(tmp_path / "pipeline", config={"components.pel_linker.search_precision": other}))[1]
    loaded.ensure_loaded()
    assert _storage(loaded.index.searcher) != auto and held(loaded) == {"names": auto, "forms": auto}

    text = (DOCS / "configuration.md").read_text(encoding="utf8")
    row = next(line for line in text.splitlines() if line.startswith("| `search_precision` |"))
    assert "`name_rows`" in row and "`alias_rows`" in row and "do not follow this setting" in row, row
