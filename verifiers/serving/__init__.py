"""Local model serving: a tiny model writer (``tiny_model``) and a vLLM installer/launcher (``vllm``).

Nothing is imported here eagerly: the tiny model writer needs torch and transformers, which
``import verifiers`` must never pay for.
"""
