"""A real vLLM server (CPU build) serving the tiny model, shared by every test of a session.

Start-up costs ~50 s on two cores (and the first install of vLLM a few minutes), so one server per
test process is started on first use and reused by every test that asks for it, whichever conftest
imported the fixture; it is stopped when the process exits.

Use in a conftest::

    from tests.support.vllm import tiny_model_dir, vllm_server  # noqa: F401  (pytest fixtures)

and in a test::

    def test_something(vllm_server):
        vllm_server.base_url   # "http://127.0.0.1:PORT/v1"
        vllm_server.model      # the model name to send

The server runs in dev mode (``/collective_rpc`` enabled). A test that reloads weights into the
shared server must reload the original weights (``vllm_server.reload_weights(vllm_server.model_dir)``)
before it ends, or start its own server with :func:`start_vllm`.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from verifiers.serving.tiny_model import TinyModelSpec, write_tiny_model
from verifiers.serving.vllm import VLLMServer

#: Seed of the shared tiny model; tests may rely on its vocabulary (printable ASCII + bytes).
TINY_SEED = 0
#: Context length of the shared server (the tiny model's maximum).
SHARED_MAX_MODEL_LEN = 2048

_lock = threading.Lock()
_shared: VLLMServer | None = None
_shared_model: Path | None = None


def make_tiny_model(out_dir: str | Path, seed: int = TINY_SEED) -> Path:
    """Write the default tiny model (hidden 128, 2 layers, 2 heads of 64) into ``out_dir``."""
    return write_tiny_model(out_dir, TinyModelSpec(seed=seed), overwrite=True)


def start_vllm(
    model_dir: str | Path, port: int | None = None, dev_mode: bool = True, **kwargs: object
) -> VLLMServer:
    """Start a vLLM server for ``model_dir`` and wait until it is healthy (installs vLLM if missing).

    The returned handle has ``.base_url``, ``.model``, ``.url``, ``.model_dir``, ``.reload_weights()``
    and ``.stop()``; the caller stops it.
    """
    server = VLLMServer(model_dir, port, dev_mode=dev_mode, **kwargs)  # type: ignore[arg-type]
    return server.start()


def shared_tiny_model() -> Path:
    """The tiny model folder used by the shared server (written once per process)."""
    global _shared_model
    with _lock:
        if _shared_model is None:
            folder = Path(tempfile.mkdtemp(prefix="vf-tiny-model-"))
            atexit.register(shutil.rmtree, folder, True)
            _shared_model = make_tiny_model(folder / "tiny")
        return _shared_model


def shared_vllm() -> VLLMServer:
    """The process-wide vLLM server for the tiny model, started on first call."""
    global _shared
    model_dir = shared_tiny_model()
    with _lock:
        if _shared is None or not _shared.is_running():
            # The tokenizer is character level, so prompts are long in tokens: allow the model's full 2048.
            # A request may bring its own chat template (tests of templates that rewrite history).
            _shared = start_vllm(model_dir, dev_mode=True, max_model_len=SHARED_MAX_MODEL_LEN,
                                 extra_args=["--trust-request-chat-template"])
            atexit.register(_shared.stop)
        return _shared


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """Path of the shared tiny model (read-only by convention: copy it before changing it)."""
    return shared_tiny_model()


@pytest.fixture(scope="session")
def vllm_server() -> Iterator[VLLMServer]:
    """The shared real vLLM server (dev mode) serving the tiny model."""
    yield shared_vllm()
