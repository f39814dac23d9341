"""Fixtures of the CLI tests: the shared real vLLM server and helpers to run ``vf``."""

from tests.support.vllm import tiny_model_dir, vllm_server  # noqa: F401  (pytest fixtures)
