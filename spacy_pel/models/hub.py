"""Whether a Hugging Face model name can be loaded here: from the local cache, or from a reachable hub;
and a transformer's weights read from safetensors only (:func:`load_safetensors_model`).

transformers retries an unreachable hub for half a minute or more before it gives up, so on a machine
without internet (clusters, CI, this project's own machines) a mistyped encoder name cost that long
before its error. :func:`check_hub_name` answers within ``PROBE_TIMEOUT`` seconds instead. Behind a
proxy the direct probe says nothing, so it is skipped and transformers decides.
"""
from __future__ import annotations

import socket
from pathlib import Path
from urllib.parse import urlparse
from urllib.request import getproxies

from huggingface_hub import constants, try_to_load_from_cache
from huggingface_hub.utils import HFValidationError  # (.errors only from 0.24; transformers 4.40 allows 0.19)
from transformers import AutoModel

from ..files import InputError

PROBE_TIMEOUT = 3.0
# the proxy schemes an https hub request goes through (urllib reads them from the environment or the OS)
PROXY_SCHEMES = ("https", "all")
SAFETENSORS_FILES = ("model.safetensors", "model.safetensors.index.json")


def is_cached(name: str) -> bool:
    """Whether the Hugging Face cache holds ``name``'s config (an invalid repo id is not cached)."""
    try:
        return isinstance(try_to_load_from_cache(name, "config.json"), str)
    except HFValidationError:
        return False


def hub_reachable(endpoint: str = "", timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether a TCP connection to the hub's host opens within ``timeout`` seconds."""
    url = urlparse(endpoint or constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def check_hub_name(name: str) -> None:
    """Raise :class:`~spacy_pel.files.InputError` at once when ``name`` is neither cached nor loadable
    from the hub (offline mode, or the hub's host unreachable)."""
    if is_cached(name) or any(getproxies().get(scheme) for scheme in PROXY_SCHEMES):
        return
    if constants.HF_HUB_OFFLINE or not hub_reachable():
        where = "offline mode is on" if constants.HF_HUB_OFFLINE else f"{constants.ENDPOINT} cannot be reached"
        raise InputError(f"encoder not found: {name} (no such folder, not in the Hugging Face cache, and {where}: "
                         "check the name, or give a model folder)")


def load_safetensors_model(source: str, **kwargs) -> AutoModel:
    """``AutoModel.from_pretrained(source, **kwargs)`` with its weights read from safetensors only: pickled
    weights (``pytorch_model.bin``) are never read, whatever their origin. A local folder without them is
    refused (``OSError``, one line from the commands) before anything is read; a hub model without them fails
    in transformers, with its own message."""
    folder = Path(source)
    if folder.is_dir() and not any((folder / name).is_file() for name in SAFETENSORS_FILES):
        raise OSError(f"{folder}: no model.safetensors; spacy_pel reads weights from safetensors only (pickled "
                      "weights, pytorch_model.bin, are never read). Convert the model once, where you trust it: "
                      "AutoModel.from_pretrained(FOLDER).save_pretrained(NEW_FOLDER, safe_serialization=True), and "
                      "copy its tokenizer files beside it")
    return AutoModel.from_pretrained(source, use_safetensors=True, **kwargs)
