"""MCP toolsets: ``vf.Toolset`` servers and the client sessions a rollout's harness calls.

* ``toolset``: :class:`Toolset`, :class:`ToolsetConfig`, :class:`SharedToolsetConfig`, and the
  server process (``python -m verifiers.v1.mcp``).
* ``client``: the host side: starting servers, one rollout's servers, the run's shared ones.

Where a toolset is returned decides its scope: ``Task.toolsets(config)`` -> one server per rollout
(closed when the rollout ends); ``Taskset.toolsets(config)`` -> one server per worker process for
the whole run, each call seeing its own rollout's ``State``. A config with ``url`` reaches an MCP
server already running there instead. Needs the ``mcp`` package (``verifiers[compat]``).
"""

from verifiers.v1.mcp.toolset import SharedToolsetConfig, Toolset, ToolsetConfig

__all__ = ["SharedToolsetConfig", "Toolset", "ToolsetConfig"]
