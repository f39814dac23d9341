"""Where the library keeps its files (``verifiers.v1.utils.paths`` in the original)."""

from __future__ import annotations

import tempfile
from pathlib import Path

__all__ = ["CACHE_DIR", "home_dir"]


def home_dir() -> Path:
    """The user's home folder; the temporary folder when there is none (a service account
    without a home), so importing never fails."""
    try:
        return Path.home()
    except RuntimeError:
        return Path(tempfile.gettempdir())


CACHE_DIR = home_dir() / ".cache" / "verifiers"
