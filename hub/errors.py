"""The hub's errors. Its own module, so that the state (``hub.core``), the services (``hub.services``),
the request helpers (``hub.http``) and the routers import it without importing each other.

The services raise *domain* errors, which say what went wrong (``NotFound``, ``Forbidden``,
``Conflict``, ...), never how HTTP says it; ``HTTP_STATUS`` below is the one place that maps each kind
to a status, and the application's one ``HubError`` handler (``hub.app``) answers with it. The HTTP
layer may still raise ``HubError(status, message)`` itself for what only HTTP knows (406, a 401
challenge, 413 of a request).
"""

from __future__ import annotations


class HubError(Exception):
    """An error with an HTTP status and a message meant for the client."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


class DomainError(HubError):
    """An error of the service layer: a kind and a message for the client; its status comes from
    ``HTTP_STATUS``."""

    def __init__(self, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(HTTP_STATUS[type(self)], message, headers)


class Invalid(DomainError):
    """The request names something that cannot exist (a malformed name, a local version, ...)."""


class Unauthenticated(DomainError):
    """No credentials, or credentials that are wrong."""


class Forbidden(DomainError):
    """The caller may not do this (or the name is reserved or protected)."""


class NotFound(DomainError):
    """Absent, or not visible to the caller: the two look alike."""


class Conflict(DomainError):
    """The state forbids it: a taken name, an immutable version, a last admin."""


class TooLarge(DomainError):
    """Over a size limit."""


class Unprocessable(DomainError):
    """Well-formed but unusable input (a bad field value)."""


class RateLimited(DomainError):
    """Too many requests; the headers say when to retry."""


HTTP_STATUS: dict[type[DomainError], int] = {
    Invalid: 400,
    Unauthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooLarge: 413,
    Unprocessable: 422,
    RateLimited: 429,
}


def not_found(what: str = "not found") -> HubError:
    return NotFound(what)
