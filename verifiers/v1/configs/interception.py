"""``[env.interception]``: where the interception proxy runs and how a consumer outside this
machine would reach it. The original's three shapes load, by ``type``:

* ``elastic`` (the default): servers grown on demand, ``multiplex`` rollouts each;
* ``server``: one server, reached through its ``tunnel`` (``prime``, or ``custom``: a tunnel,
  reverse proxy or bind address you run, given by ``url`` and ``port``);
* ``static``: a fixed list of ``server`` entries, least-loaded first.

On this library every agent program runs on this machine (the local runtimes; the remote ones are
refused at start with one line), so every rollout's traffic reaches one loopback proxy per run,
with its own path and secret per rollout. A tunnel only matters to a consumer elsewhere, which is
why no shape changes what a run records here; the shapes load so a config written for the
original runs unmodified, and a malformed one is refused like any other config.
"""

from typing import Annotated, Literal

from pydantic import Field

from verifiers.v1.configs import BaseConfig


class PrimeTunnelConfig(BaseConfig):
    type: Literal["prime"] = "prime"


class CustomTunnelConfig(BaseConfig):
    type: Literal["custom"] = "custom"
    url: str
    """The public address consumers use."""
    port: int = Field(ge=1, le=65535)
    """The local port the tunnel forwards to (the server binds it)."""


TunnelConfig = Annotated[PrimeTunnelConfig | CustomTunnelConfig, Field(discriminator="type")]


class InterceptionServerConfig(BaseConfig):
    type: Literal["server"] = "server"
    tunnel: TunnelConfig = PrimeTunnelConfig()


class StaticInterceptionPoolConfig(BaseConfig):
    type: Literal["static"] = "static"
    servers: list[InterceptionServerConfig] = Field(min_length=1)


class ElasticInterceptionPoolConfig(BaseConfig):
    type: Literal["elastic"] = "elastic"
    multiplex: int = Field(32, ge=1)
    """Rollouts that share one server."""


InterceptionConfig = Annotated[
    InterceptionServerConfig | StaticInterceptionPoolConfig | ElasticInterceptionPoolConfig,
    Field(discriminator="type"),
]

__all__ = [
    "CustomTunnelConfig",
    "ElasticInterceptionPoolConfig",
    "InterceptionConfig",
    "InterceptionServerConfig",
    "PrimeTunnelConfig",
    "StaticInterceptionPoolConfig",
    "TunnelConfig",
]
