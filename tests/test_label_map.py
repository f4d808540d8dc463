"""The label → KB types map learned from a corpus's gold ids (spacy_pel.pipeline.label_map and
``python -m spacy_pel label-types``), and a pipeline config written with it."""
import json

import pytest
import spacy
from spacy.tokens import Span
from spacy.util import load_config
from typer.testing import CliRunner

from spacy_pel.cli.label_types import app
from spacy_pel.corpora import GOLD_KEY, write_docbin
from spacy_pel.files import InputError
from spacy_pel.pipeline.label_map import learn_label_types, read_label_types, write_linker_config
from spacy_pel.retrieval.build import build_kb
from spacy_pel.retrieval.index import EntityIndex

# ids: D1 lithium carbonate (Chemical, Salt), D2 tricuspid regurgitation (Disease), D3 atrial flutter
# (Disease, Rhythm), D4 aspirin (Chemical), D5 warfarin (Chemical) — types rewritten below
TYPES = {"D1": ["Chemical", "Salt"], "D2": ["Disease"], "D3": ["Rhythm"], "D4": ["Chemical"], "D5": ["Drug"]}
GOLD = [("Chem", "D1"), ("Chem", "D4"), ("Chem", "D4"), ("Chem", "D5"), ("Chem", "NIL"), ("Chem", "D9"),
        ("Dis", "D2"), ("Dis", "D2"), ("Dis", "D2|D3"), ("Dis", "D3"), ("Odd", "NIL")]


@pytest.fixture
def typed_kb(tmp_path, tiny_encoder_dir):
    lines = [json.dumps({"id": i, "name": f"entity {i}", "types": t}) for i, t in TYPES.items()]
    (tmp_path / "kb.jsonl").write_text("\n".join(lines) + "\n", encoding="utf8")
    out = tmp_path / "kb"
    build_kb(tmp_path / "kb.jsonl", out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return out


@pytest.fixture
def corpus(tmp_path):
    nlp = spacy.blank("en")
    doc = nlp.make_doc(" ".join(f"w{i}" for i in range(len(GOLD))))
    doc.spans[GOLD_KEY] = [Span(doc, i, i + 1, label, kb_id=kb) for i, (label, kb) in enumerate(GOLD)]
    path = tmp_path / "train.spacy"
    write_docbin([doc], path)
    return path, [doc]


def test_types_covering_most_mentions_are_kept(typed_kb, corpus):
    index = EntityIndex.from_disk(typed_kb)
    _, docs = corpus
    # Chem: 4 in-KB mentions (NIL and the unknown D9 do not count): Chemical covers 3 (D1, D4, D4), Drug the 4th
    label_types, report = learn_label_types(docs, index, coverage=0.95)
    assert label_types == {"Chem": ["Chemical", "Drug"], "Dis": ["Disease", "Rhythm"]}
    assert report["Chem"]["mentions"] == 6 and report["Chem"]["in_kb"] == 4
    assert [s["type"] for s in report["Chem"]["types"]] == ["Chemical", "Drug"] and report["Chem"]["covered"] == 1.0
    assert report["Odd"] == {"mentions": 1, "in_kb": 0, "types": [], "covered": 0.0}
    # a lower coverage stops after the first type; a type adding too few mentions is not kept
    assert learn_label_types(docs, index, coverage=0.7)[0] == {"Chem": ["Chemical"], "Dis": ["Disease"]}
    assert learn_label_types(docs, index, min_share=0.3)[0] == {"Chem": ["Chemical"], "Dis": ["Disease"]}  # each 2nd adds 0.25
    assert learn_label_types(docs, index, min_share=0.25)[0] == {"Chem": ["Chemical", "Drug"], "Dis": ["Disease", "Rhythm"]}
    with pytest.raises(ValueError, match="coverage"):
        learn_label_types(docs, index, coverage=0)


def test_config_written_with_the_map_builds_the_rule(typed_kb, tmp_path):
    out = tmp_path / "linker.cfg"
    assert write_linker_config("configs/linker_rules.cfg", {"Dis": ["Disease"]}, out) == "pel_linker"
    cfg = load_config(out, interpolate=False)
    assert cfg["components"]["pel_linker"]["rules"]["label_types"]["label_types"] == {"Dis": ["Disease"]}
    assert cfg["components"]["pel_linker"]["rules"]["names"]["names"] == "${paths.names}"  # the rest as it was
    nlp = spacy.blank("en")
    rules = {"label_types": dict(cfg["components"]["pel_linker"]["rules"]["label_types"])}
    nlp.add_pipe("pel_linker", config={"kb": str(typed_kb), "rules": rules})
    assert nlp.get_pipe("pel_linker").rules["label_types"].allowed == {"Dis": {"Disease"}}
    (tmp_path / "none.cfg").write_text("[nlp]\nlang = \"en\"\npipeline = []\n[components]\n")
    with pytest.raises(InputError, match="one pel_linker component with a \\[rules.label_types\\] rule, found 0"):
        write_linker_config(tmp_path / "none.cfg", {}, out)


def test_read_label_types_refuses_other_shapes(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"Dis": ["Disease"]}')
    assert read_label_types(path) == {"Dis": ["Disease"]}
    for bad in ('{"Dis": "Disease"}', '["Disease"]', "{", '{"Dis": [1]}'):
        path.write_text(bad)
        with pytest.raises(InputError, match=str(path)):
            read_label_types(path)


def test_cli_learns_writes_and_takes_a_given_map(typed_kb, corpus, tmp_path):
    path, _ = corpus
    out, cfg_out = tmp_path / "lt.json", tmp_path / "linker.cfg"
    args = [str(path), "--kb", str(typed_kb), "-o", str(out), "--config", "configs/linker_rules.cfg", "--config-out", str(cfg_out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {"Chem": ["Chemical", "Drug"], "Dis": ["Disease", "Rhythm"]}
    assert load_config(cfg_out, interpolate=False)["components"]["pel_linker"]["rules"]["label_types"]["label_types"]["Dis"] == ["Disease", "Rhythm"]
    given = tmp_path / "given.json"
    given.write_text('{"Chem": ["Drug"]}')
    result = CliRunner().invoke(app, args + ["--map", str(given)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {"Chem": ["Drug"]}
    result = CliRunner().invoke(app, args[:-2])
    assert result.exit_code == 2 and "--config and --config-out together" in result.output


def test_cli_takes_a_given_map_without_corpora_and_learning_needs_them(typed_kb, tmp_path):
    given, out = tmp_path / "given.json", tmp_path / "lt.json"
    given.write_text('{"Chem": ["Drug"]}')
    result = CliRunner().invoke(app, ["--kb", str(typed_kb), "-o", str(out), "--map", str(given)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text()) == {"Chem": ["Drug"]}
    result = CliRunner().invoke(app, ["--kb", str(typed_kb), "-o", str(tmp_path / "learned.json")])
    assert result.exit_code == 2 and "give the annotated .spacy corpora" in result.output
    assert not (tmp_path / "learned.json").exists()


def test_a_map_written_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "map.json"  # Windows Notepad's UTF-8 begins with one, as the KB and corpus readers accept
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"Disease": ["Diseases"]}).encode())
    assert read_label_types(path) == {"Disease": ["Diseases"]}


@pytest.mark.parametrize("head, fragment", [(b"# a comment\n# caf\xe9 (cp1252)\n", ":2: not UTF-8"),
                                            (b"\xef\xbb\xbf", None)])
def test_a_config_from_a_windows_editor(typed_kb, corpus, tmp_path, head, fragment):
    """--config with a cp1252 byte names its line (not "byte 0xe9 in position …"); one with a byte-order mark is
    read (session 72 left this alone)."""
    config = tmp_path / "rules.cfg"
    config.write_bytes(head + open("configs/linker_rules.cfg", "rb").read())
    out, cfg_out = tmp_path / "lt.json", tmp_path / "linker.cfg"
    result = CliRunner().invoke(app, [str(corpus[0]), "--kb", str(typed_kb), "-o", str(out), "--config", str(config),
                                      "--config-out", str(cfg_out)])
    if fragment is None:
        assert result.exit_code == 0, result.output
        assert load_config(cfg_out, interpolate=False)["components"]["pel_linker"]["rules"]["label_types"]["label_types"]
    else:
        errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
        assert result.exit_code == 2 and len(errors) == 1 and f"{config}{fragment}" in errors[0], result.output
        assert not out.exists() and not cfg_out.exists()
