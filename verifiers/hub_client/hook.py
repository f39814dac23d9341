"""The hub's installer for the loader: ``vf.load_environment("owner/name@1.0", install=True)``.

The loader (:mod:`verifiers.utils.env_loading`) knows no hub. Importing :mod:`verifiers.hub_client`
registers :func:`install_for_loader` with it, and the ``verifiers.installers`` entry point of the
``verifiers`` distribution names the same function for programs that never import the client. The
dependency therefore points one way only: hub client -> loader.
"""

from __future__ import annotations

import logging

from verifiers.errors import EnvironmentNotFoundError
from verifiers.ids import EnvId

_log = logging.getLogger("verifiers.hub_client")


def install_for_loader(env_id: EnvId) -> None:
    """Install ``env_id`` (``owner/name`` at ``version``, None: latest) from the hub configured by
    ``vf login`` / ``VF_HUB_URL`` / ``VF_HUB_TOKEN``, pinned by sha256."""
    from verifiers.hub_client.api import EnvRef, HubClient, HubClientError
    from verifiers.hub_client.install import install

    if not env_id.owner:
        raise EnvironmentNotFoundError(f"the hub installs owner/name ids, not {str(env_id)!r}")
    try:
        with HubClient() as client:
            # The same verification gate as `vf install` (inside install()); VF_ALLOW_UNVERIFIED=1
            # is the loader's --allow-unverified.
            install(client, [EnvRef(env_id.owner, env_id.name, env_id.version)], log=_log.warning)
    except HubClientError as exc:
        hint = f" ({exc.hint})" if exc.hint else ""
        raise EnvironmentNotFoundError(f"could not install {env_id} from the hub: {exc.message}{hint}") from None


def register() -> None:
    """Register the hub's installer with the loader (idempotent)."""
    from verifiers.utils.env_loading import register_installer

    register_installer(install_for_loader)
