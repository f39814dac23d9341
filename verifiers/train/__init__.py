"""The training adapter: environments -> asynchronous torch + vLLM RL (see docs in the README).

Submodules are imported on use (torch is heavy): ``samples``, ``advantages``, ``loss``, ``packing``,
``trainer``, ``fsdp``, ``orchestrator``, ``inference``, ``config``, ``checkpoint``, ``metrics``,
``loop``, ``cli``, ``trl_bridge``.
"""
