"""``verifiers.v1.utils.image``: images as ``data:`` URLs for image content parts."""

from __future__ import annotations

import base64
import io
from typing import Any


def image_data_url(image: Any) -> str:
    """A PIL image (anything with ``save(file, format=...)``) as a base64 PNG ``data:`` URL, the
    url of an ``ImageUrlContentPart``."""
    save = getattr(image, "save", None)
    if not callable(save):
        raise TypeError(f"image_data_url takes a PIL image (with .save), not {type(image).__name__}")
    buffer = io.BytesIO()
    save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


__all__ = ["image_data_url"]
