"""Structured JSON logs. Secrets never reach them: requests are logged by method, path and status,
never headers or query strings, and token values are never passed to a logger."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_RESERVED = set(vars(logging.makeLogRecord({})).keys()) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line. It runs once per request (the access line), so it is kept cheap:
    the date part of the timestamp is formatted once a second, the record's extra fields are found by
    a set difference, and the encoder is built once (``json.dumps(..., default=str)`` builds a new one
    on every call, which was half of the formatting time)."""

    _encoder = json.JSONEncoder(default=str)

    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        second = int(record.created)
        if second != self._second:  # (a race between threads only formats the same second twice)
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
            self._second = second
        out: dict[str, Any] = {
            "ts": f"{self._stamp}.{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = record.__dict__
        extra = fields.keys() - _RESERVED
        if extra:
            for k in fields:  # in the order they were given
                if k in extra and not k.startswith("_"):
                    out[k] = fields[k]
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return self._encoder.encode(out)


def setup_logging(level: str = "INFO", as_json: bool = True) -> None:
    """Configure the ``hub`` logger (idempotent)."""
    logger = logging.getLogger("hub")
    logger.setLevel(level.upper())
    if getattr(logger, "_vf_configured", False):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if as_json else logging.Formatter("%(levelname)s %(name)s %(message)s")
    )
    logger.addHandler(handler)
    logger.propagate = False
    logger._vf_configured = True  # type: ignore[attr-defined]
