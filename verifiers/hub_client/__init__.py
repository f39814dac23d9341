"""Client side of the Environments Hub: login state, the JSON API, push, install/lock, pull, evals.

Used by the ``vf`` hub commands and by ``vf.load_environment("owner/name@version", install=True)``.
Imports nothing heavy at module import time.
"""

from verifiers.hub_client.api import EnvRef, HubClient, HubClientError, parse_ref
from verifiers.hub_client.config import HubConfig, resolve

__all__ = ["EnvRef", "HubClient", "HubClientError", "HubConfig", "parse_ref", "resolve"]
