"""Files from other systems (session 72's probe): a UTF-8 byte order mark is read as without it, and a byte
that is not UTF-8 is one clear error naming the file (its line and column where the reader has lines), in
every reader — bulk's PubTator shards, training configs, BioC JSON, alias counts, id maps."""
import json
from pathlib import Path

import pytest
from confection import Config, ConfigValidationError
from typer.testing import CliRunner

from spacy_pel.bioc_corpus import BioCFormatError, read_bioc
from spacy_pel.bulk.shards import Shard, plan_chunks, read_chunk
from spacy_pel.cli import app
from spacy_pel.cli._errors import one_line
from spacy_pel.files import InputError
from spacy_pel.id_map import IdMapError, read_id_map
from spacy_pel.pipeline.aliases import read_aliases
from spacy_pel.training.run_config import load_config

from .test_build_kb_guard import one_line_error

ROOT = Path(__file__).resolve().parents[1]
BOM = b"\xef\xbb\xbf"
PUBTATOR = ("100|t|Lithium toxicity.\n100|a|Lithium carbonate caused tremor.\n100\t0\t7\tLithium\tChemical\tD008094\n\n"
            "200|t|Aspirin\n200|a|Warfarin and aspirin.\n200\t0\t7\tAspirin\tChemical\tD001241\n")


# ---------------------------------------------------------------------------- bulk: PubTator shards


def bulk_items(path: Path, chunk_docs: int):
    return [item for chunk in plan_chunks(Shard(str(path), path.name, "pubtator"), chunk_docs)
            for item in read_chunk(chunk.as_item())]


@pytest.mark.parametrize("chunk_docs", [1, 1000])
def test_a_pubtator_shard_with_a_bom_gives_every_document(tmp_path, chunk_docs):
    plain, marked = tmp_path / "plain.pubtator", tmp_path / "bom.pubtator"
    plain.write_bytes(PUBTATOR.encode())
    marked.write_bytes(BOM + PUBTATOR.replace("\n", "\r\n").encode())
    want = bulk_items(plain, chunk_docs)
    assert [(i["doc_id"], i["error"]) for i in want] == [("100", ""), ("200", "")]
    got = bulk_items(marked, chunk_docs)
    fields = ("seq", "doc_id", "text", "spans", "error", "title_length")
    assert [[i[f] for f in fields] for i in got] == [[i[f] for f in fields] for i in want]


# ---------------------------------------------------------------------------- training configs


def cp1252_config(tmp_path: Path, name: str) -> Path:
    text = (ROOT / "configs" / name).read_text(encoding="utf8").encode("ascii", "replace").decode()
    lines = text.splitlines()
    path = tmp_path / f"cp1252_{name}"
    path.write_bytes("\n".join([*lines[:3], "# caf\xe9 au lait", *lines[3:]]).encode("cp1252"))
    return path


def test_load_config_reads_a_bom_as_without_it(tmp_path):
    text = (ROOT / "configs" / "train_pb_random.cfg").read_text(encoding="utf8")
    (tmp_path / "bom.cfg").write_bytes(BOM + text.replace("\n", "\r\n").encode("utf8"))
    (tmp_path / "plain.cfg").write_text(text, encoding="utf8")
    overrides = {"training.max_steps": 3}
    assert load_config(tmp_path / "bom.cfg", overrides) == load_config(tmp_path / "plain.cfg", overrides)


def test_load_config_refuses_a_file_that_is_not_utf8_naming_its_line(tmp_path):
    path = cp1252_config(tmp_path, "train_pb_random.cfg")
    with pytest.raises(InputError, match=r"^.*cp1252_train_pb_random.cfg:4: not UTF-8 text \(byte 0xe9 at column 6\)"):
        load_config(path)


def test_load_config_names_the_file_of_a_config_that_does_not_parse(tmp_path):
    (tmp_path / "bad.cfg").write_text("max_steps = 3\n[training]\n", encoding="utf8")
    with pytest.raises(ConfigValidationError) as err:
        load_config(tmp_path / "bad.cfg")
    assert one_line(err.value).startswith(f"{tmp_path / 'bad.cfg'}: ")
    assert "File contains no section headers" in one_line(err.value)


def test_one_line_keeps_the_reason_of_a_config_error_without_error_list():
    try:
        Config().from_str("[a]\nb = ${x.y}\n")
    except ConfigValidationError as err:
        line = one_line(err)
    assert line.startswith("Config validation error: Bad value substitution: option 'b'"), line


COMMANDS = {  # command → its arguments around the config file (all fail while reading it)
    "adapt": lambda tmp, cfg: ["adapt", tmp / "kb.jsonl", "-o", tmp / "enc", "--config", cfg],
    "train": lambda tmp, cfg: ["train", cfg, "-o", tmp / "out"],
    "train-spans": lambda tmp, cfg: ["train-spans", "--config", cfg, "-o", tmp / "spans"],
    "train-e2e": lambda tmp, cfg: ["train-e2e", cfg, "-o", tmp / "e2e"],
    "train-reranker": lambda tmp, cfg: ["train-reranker", "--config", cfg, "-o", tmp / "rr"],
}
SHIPPED = {"adapt": "adapt.cfg", "train": "train_pb_random.cfg", "train-spans": "train_spans.cfg",
           "train-e2e": "train_e2e.cfg", "train-reranker": "train_reranker.cfg"}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_training_commands_refuse_a_config_that_is_not_utf8_in_one_line(tmp_path, command):
    (tmp_path / "kb.jsonl").write_text('{"id": "X1", "name": "aspirin"}\n{"id": "X2", "name": "warfarin"}\n')
    config = cp1252_config(tmp_path, SHIPPED[command])
    result = CliRunner().invoke(app, [str(a) for a in COMMANDS[command](tmp_path, config)])
    one_line_error(result, f"{config}:4: not UTF-8 text (byte 0xe9 at column 6)")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_training_commands_say_why_a_config_does_not_parse(tmp_path, command):
    (tmp_path / "kb.jsonl").write_text('{"id": "X1", "name": "aspirin"}\n{"id": "X2", "name": "warfarin"}\n')
    config = tmp_path / "headless.cfg"
    config.write_text("seed = 1\n" + (ROOT / "configs" / SHIPPED[command]).read_text(encoding="utf8"), encoding="utf8")
    result = CliRunner().invoke(app, [str(a) for a in COMMANDS[command](tmp_path, config)])
    one_line_error(result, str(config), "File contains no section headers")


# ---------------------------------------------------------------------------- BioC JSON


def test_bioc_json_that_is_not_utf8_names_the_line_and_column(tmp_path):
    doc = {"id": "100", "infons": {}, "relations": [], "annotations": [], "passages": [
        {"offset": 0, "infons": {"type": "title"}, "text": "Aspirin toxicity.", "sentences": [], "relations": [],
         "annotations": []},
        {"offset": 18, "infons": {"type": "abstract"}, "text": "Seen in a caf\xe9 worker.", "sentences": [],
         "relations": [], "annotations": []}]}
    data = json.dumps({"source": "", "date": "", "key": "", "infons": {}, "documents": [doc]},
                      ensure_ascii=False, indent=2).encode("cp1252")
    at = data.index(b"\xe9")
    line, column = data[:at].count(b"\n") + 1, at - data.rfind(b"\n", 0, at)
    assert line > 1
    path = tmp_path / "corpus.json"
    for prefix in (b"", BOM):
        path.write_bytes(prefix + data.replace(b"\n", b"\r\n"))
        with pytest.raises(BioCFormatError) as err:
            read_bioc(path, "bioc-json")
        assert str(err.value) == f"{path}:{line}: not UTF-8 text (byte 0xe9 at column {column})"
        assert err.value.line == line


# ---------------------------------------------------------------------------- alias counts


def test_alias_counts_that_are_not_utf8_name_the_file(tmp_path):
    path = tmp_path / "aliases.json"
    path.write_bytes('{\n"caf\xe9": {"D1": 2}\n}\n'.encode("cp1252"))
    with pytest.raises(InputError, match=r"aliases.json:2: not UTF-8 text \(byte 0xe9 at column 5\).*`aliases`"):
        read_aliases(path)


def test_alias_counts_that_are_not_json_are_an_input_error(tmp_path):
    path = tmp_path / "aliases.json"
    path.write_text('{"x": {"D1": 1},\n oops}', encoding="utf8")
    with pytest.raises(InputError, match=r"aliases.json:2: not valid JSON"):
        read_aliases(path)
    path.write_text('{"x": 3}', encoding="utf8")
    with pytest.raises(InputError, match="surface"):
        read_aliases(path)


# ---------------------------------------------------------------------------- id maps


def test_an_id_map_header_after_comments_and_blank_lines_is_a_header(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("# ids merged by NLM\n\nold_id\tnew_id\nD1\tD2\n", encoding="utf8")
    assert read_id_map(path) == {"D1": "D2"}
    path.write_text("# ids merged by NLM\nold_id\tnote\nD1\tD2\n", encoding="utf8")
    with pytest.raises(IdMapError, match="a header's second column must be 'new_id' \\(found 'note'\\)") as err:
        read_id_map(path)
    assert err.value.line == 2


def test_old_id_after_the_first_mapping_is_an_id(tmp_path):
    path = tmp_path / "m.tsv"
    path.write_text("D1\tD2\nold_id\tD3\n", encoding="utf8")
    assert read_id_map(path) == {"D1": "D2", "old_id": "D3"}
