"""Where the hub is and which token to use: ``vf login`` state, overridable by environment variables.

Resolution order (first wins): explicit arguments, ``VF_HUB_URL`` / ``VF_HUB_TOKEN``, the user config
file written by ``vf login``, the default URL of a local embedded hub. The file lives in
``$VF_CONFIG_DIR`` (default ``$XDG_CONFIG_HOME/verifiers`` or ``~/.config/verifiers``) and is created
with mode 0600 inside a 0700 folder, like other tools that keep credentials (pip, gh, huggingface-cli).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

DEFAULT_HUB_URL = "http://127.0.0.1:8080"
CONFIG_FILE = "hub.json"


def config_dir() -> Path:
    if os.environ.get("VF_CONFIG_DIR"):
        return Path(os.environ["VF_CONFIG_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base).expanduser() / "verifiers"


def config_path() -> Path:
    return config_dir() / CONFIG_FILE


def normalise_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not a hub URL: {url!r} (expected http(s)://host[:port])")
    if parts.username or parts.password:
        raise ValueError("put the token in `vf login` or VF_HUB_TOKEN, not in the hub URL")
    return url


def _read_file() -> dict[str, str]:
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, str)} if isinstance(data, dict) else {}


@dataclass(frozen=True)
class HubConfig:
    url: str
    token: str | None
    source: str  # where the token came from: "argument", "env", "file" or "none"

    @property
    def host(self) -> str:
        return urlsplit(self.url).netloc


def resolve(url: str | None = None, token: str | None = None) -> HubConfig:
    """The hub URL and token to use now."""
    saved = _read_file()
    hub_url = url or os.environ.get("VF_HUB_URL") or saved.get("url") or DEFAULT_HUB_URL
    hub_url = normalise_url(hub_url)
    if token:
        return HubConfig(hub_url, token, "argument")
    if os.environ.get("VF_HUB_TOKEN"):
        return HubConfig(hub_url, os.environ["VF_HUB_TOKEN"], "env")
    # A saved token belongs to the hub it was issued by: never send it to another host.
    if saved.get("token") and normalise_url(saved.get("url", DEFAULT_HUB_URL)) == hub_url:
        return HubConfig(hub_url, saved["token"], "file")
    return HubConfig(hub_url, None, "none")


def save(url: str, token: str) -> Path:
    """Store the login atomically with owner-only permissions."""
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    path = config_path()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".hub-", suffix=".json")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump({"url": normalise_url(url), "token": token}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def forget() -> bool:
    """Remove the stored login; True when there was one."""
    try:
        config_path().unlink()
        return True
    except FileNotFoundError:
        return False
