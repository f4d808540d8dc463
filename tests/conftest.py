"""Shared fixtures: a tiny random BERT (seconds to build and run) and paths to the real data."""
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared(*parts: str) -> Path:
    """A file of ../shared/data; tests that need it fail loudly if it is missing (no silent skip)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.fail(f"real data missing: {path} (run from a checkout with ../shared beside it)")
    return path


def make_tiny_bert(path: Path, seed: int = 0) -> Path:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from spacy_pel.models.encoder import resolve_model_name

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_name("all-MiniLM-L6-v2"))
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    BertModel(config).save_pretrained(path, safe_serialization=True)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def other_tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("other_bert"), seed=1)


@pytest.fixture(scope="session")
def tiny_encoder_dir(tiny_bert, tmp_path_factory) -> Path:
    from spacy_pel.models.encoder import BiEncoder

    out = tmp_path_factory.mktemp("enc") / "encoder"
    BiEncoder.from_pretrained(str(tiny_bert)).save(out)
    return out


KB_LINES = [
    '{"id": "D1", "name": "lithium carbonate", "aliases": ["Li2CO3"], "types": ["Chemical"]}',
    '{"id": "D2", "name": "tricuspid regurgitation", "types": ["Disease"], "description": "valve leak"}',
    '{"id": "D3", "name": "atrial flutter", "aliases": ["flutter"], "types": ["Disease"]}',
    '{"id": "D4", "name": "aspirin", "aliases": ["acetylsalicylic acid"], "types": ["Chemical"]}',
    '{"id": "D5", "name": "warfarin", "types": ["Chemical"]}',
]


@pytest.fixture
def kb_file(tmp_path) -> Path:
    path = tmp_path / "kb.jsonl"
    path.write_text("\n".join(KB_LINES) + "\n", encoding="utf8")
    return path


@pytest.fixture
def kb_dir(tmp_path, kb_file, tiny_encoder_dir) -> Path:
    from spacy_pel.retrieval.build import build_kb

    out = tmp_path / "kb"
    build_kb(kb_file, out, format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return out


@pytest.fixture(scope="module")
def module_kb_dir(tmp_path_factory, tiny_encoder_dir) -> Path:
    """The KB of ``KB_LINES``, built once for a test module whose tests only read it (``kb_dir`` for one to change)."""
    from spacy_pel.retrieval.build import build_kb

    folder = tmp_path_factory.mktemp("module_kb")
    (folder / "kb.jsonl").write_text("\n".join(KB_LINES) + "\n", encoding="utf8")
    build_kb(folder / "kb.jsonl", folder / "kb", format="jsonl", encoder=str(tiny_encoder_dir), progress=False)
    return folder / "kb"
