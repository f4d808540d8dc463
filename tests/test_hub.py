"""A hub name that cannot load fails at once, in one line, rather than after transformers' retries."""
import os
import socket
import time

import huggingface_hub
import pytest

from spacy_pel.files import InputError
from spacy_pel.models import hub
from spacy_pel.models.encoder import resolve_model_name


@pytest.fixture
def no_proxy(monkeypatch):
    for var in [v for v in os.environ if v.lower().endswith("_proxy")]:
        monkeypatch.delenv(var)


def test_unreachable_hub_fails_fast_with_the_name(monkeypatch, no_proxy):
    def refused(*args, **kwargs):
        raise ConnectionRefusedError("refused")

    monkeypatch.setattr(socket, "create_connection", refused)
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=r"encoder not found: some-org/mistyped-model .*cannot be reached"):
        resolve_model_name("some-org/mistyped-model")
    assert time.perf_counter() - t0 < 2


def test_offline_mode_is_named(monkeypatch, no_proxy):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(InputError, match="offline mode is on"):
        resolve_model_name("some-org/mistyped-model")


def test_reachable_hub_or_proxy_or_cache_leaves_the_name_to_transformers(monkeypatch, no_proxy, tmp_path):
    opened = []

    class Connection:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def connect(address, timeout):
        opened.append(address)
        return Connection()

    monkeypatch.setattr(socket, "create_connection", connect)
    assert resolve_model_name("some-org/some-model") == "some-org/some-model"
    assert opened == [("huggingface.co", 443)]

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: (_ for _ in ()).throw(OSError("down")))
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")  # behind a proxy the direct probe says nothing
    assert resolve_model_name("some-org/some-model") == "some-org/some-model"
    monkeypatch.delenv("HTTPS_PROXY")

    monkeypatch.setattr(hub, "try_to_load_from_cache", lambda name, filename: str(tmp_path / "config.json"))
    assert resolve_model_name("some-org/cached-model") == "some-org/cached-model"


def test_a_local_folder_with_a_hub_like_name_is_not_probed(monkeypatch, no_proxy, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-encoder").mkdir()
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("probed a local folder"))
    assert resolve_model_name("my-encoder") == "my-encoder"
