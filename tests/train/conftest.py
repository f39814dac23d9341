import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The tiny local model (`vf model tiny`), written once per session."""
    from verifiers.serving.tiny_model import write_tiny_model

    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "tiny")


from tests.support.vllm import vllm_server  # noqa: E402, F401  (the shared real vLLM fixture)
