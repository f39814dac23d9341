"""A small synchronous client of the hub's JSON API (``/api/v1``), used by the ``vf`` hub commands.

Every failure a user can cause becomes :class:`HubClientError` with a one-line message (and an
optional hint), so commands print it instead of a traceback: the hub unreachable, a wrong token, an
unknown environment (with a "did you mean" suggestion), an unknown version, a conflict.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from verifiers.hub_client.config import HubConfig, resolve
from verifiers.hub_client.errors import HubClientError
from verifiers.ids import parse_env_id

LOGIN_HINT = "vf login (or set VF_HUB_TOKEN)"
#: Tokens are made where the hub runs (``vf hub user create`` prints a user's first one) or, with a
#: token that still works, through ``POST /api/v1/tokens``; the hub has no web page for them.
NEW_TOKEN_HINT = (
    "it is wrong, expired or revoked: make a new one where the hub runs (vf hub token create USER "
    "--data HUB_DATA, or ask the hub's admin), then vf login --token NEW_TOKEN (or set VF_HUB_TOKEN to it)"
)


@dataclass(frozen=True)
class EnvRef:
    """``owner/name[@version]`` as the hub commands take it."""

    owner: str
    name: str
    version: str | None = None

    @property
    def id(self) -> str:
        return f"{self.owner}/{self.name}"

    def __str__(self) -> str:
        return f"{self.id}@{self.version}" if self.version else self.id


def parse_ref(text: str, *, default_owner: str | None = None) -> EnvRef:
    """Parse ``owner/name[@version]`` (``latest`` is kept as the literal version ``latest``)."""
    try:
        parsed = parse_env_id(text)
    except ValueError as exc:
        raise HubClientError(str(exc)) from None
    owner = parsed.owner or default_owner
    if not owner:
        raise HubClientError(f"{text!r} has no owner: expected owner/name[@version]")
    return EnvRef(owner, parsed.name, parsed.version)


def _detail(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip().splitlines()[0][:300] if resp.text.strip() else resp.reason_phrase
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):  # FastAPI validation errors
        parts = []
        for item in detail[:3]:
            if isinstance(item, dict):
                loc = ".".join(str(x) for x in item.get("loc", []) if x != "body")
                parts.append(f"{loc}: {item.get('msg')}" if loc else str(item.get("msg")))
        return "; ".join(parts) or str(detail)
    return str(detail)


class HubClient:
    """Thin wrapper over httpx with the hub's error conventions. Use as a context manager."""

    def __init__(self, config: HubConfig | None = None, *, timeout: float = 60.0, warn: bool = True) -> None:
        self.config = config or resolve()
        if warn:
            from verifiers.hub_client.files import warn_if_insecure

            warn_if_insecure(self.config.url)
        headers = {"User-Agent": "vf-hub-client"}
        if self.config.token:
            headers["Authorization"] = f"Bearer {self.config.token}"
        self._http = httpx.Client(
            base_url=self.config.url, headers=headers, timeout=httpx.Timeout(timeout, connect=10.0)
        )

    def __enter__(self) -> HubClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------------------- plumbing
    def request(self, method: str, path: str, *, expect: tuple[int, ...] = (200,), **kw: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TimeoutException:
            raise HubClientError(f"the hub at {self.config.url} did not answer in time") from None
        except httpx.TransportError as exc:
            raise HubClientError(
                f"cannot reach the hub at {self.config.url} ({type(exc).__name__})",
                hint="check the URL (vf login --hub URL, or VF_HUB_URL) and that the hub is running "
                "(vf hub serve)",
            ) from None
        if resp.status_code in expect:
            return resp
        self._raise(resp)
        raise AssertionError("unreachable")

    def _raise(self, resp: httpx.Response) -> None:
        detail = _detail(resp)
        if resp.status_code == 401:
            if not self.config.token:
                raise HubClientError("this needs a token", hint=LOGIN_HINT, status=401)
            # Logging in again with the same token changes nothing: say where a new one comes from.
            raise HubClientError(f"the hub refused the token: {detail}", hint=NEW_TOKEN_HINT, status=401)
        if resp.status_code == 403:
            raise HubClientError(f"not allowed: {detail}", status=403)
        if resp.status_code == 429:
            raise HubClientError(f"rate limited by the hub: {detail}", hint="wait a moment and retry", status=429)
        raise HubClientError(detail, status=resp.status_code)

    def json(self, method: str, path: str, **kw: Any) -> Any:
        return self.request(method, path, **kw).json()

    # ------------------------------------------------------------------------------- accounts
    def whoami(self) -> dict[str, Any]:
        return self.json("GET", "/api/v1/whoami")

    # --------------------------------------------------------------------------- environments
    def search(self, q: str = "", *, tags: list[str] | None = None, owner: str | None = None,
               sort: str = "downloads", page: int = 1, per_page: int = 20) -> dict[str, Any]:
        params: list[tuple[str, str | int]] = [("q", q), ("sort", sort), ("page", page), ("per_page", per_page)]
        params += [("tag", t) for t in tags or []]
        if owner:
            params.append(("owner", owner))
        return self.json("GET", "/api/v1/environments", params=params)

    def environment(self, ref: EnvRef) -> dict[str, Any]:
        try:
            return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}")
        except HubClientError as exc:
            if exc.status == 404:
                raise self._not_found(ref) from None
            raise

    def _not_found(self, ref: EnvRef) -> HubClientError:
        """404 with the closest visible names as a suggestion."""
        candidates: list[str] = []
        try:
            for q in (ref.name, ""):
                for item in self.search(q, per_page=100, sort="name")["items"]:
                    candidates.append(item["id"])
                if candidates:
                    break
        except HubClientError:
            pass
        close = difflib.get_close_matches(ref.id, candidates, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(close)}?" if close else "vf search TEXT lists environments"
        return HubClientError(f"environment {ref.id} not found on {self.config.url}", hint=hint, status=404)

    def version(self, ref: EnvRef, version: str | None = None) -> dict[str, Any]:
        """Version detail; ``latest`` (or None) resolves on the hub."""
        v = version or ref.version or "latest"
        try:
            return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}/versions/{v}")
        except HubClientError as exc:
            if exc.status != 404:
                raise
            detail = self.environment(ref)  # raises the "did you mean" error when the env is unknown
            known = ", ".join(detail.get("versions", [])[:10]) or "none"
            raise HubClientError(
                f"{ref.id} has no version {v} (versions: {known})", status=404
            ) from None

    def version_or_none(self, ref: EnvRef, version: str) -> dict[str, Any] | None:
        try:
            return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}/versions/{version}")
        except HubClientError as exc:
            if exc.status == 404:
                return None
            raise

    def versions(self, ref: EnvRef) -> list[dict[str, Any]]:
        try:
            return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}/versions")
        except HubClientError as exc:
            if exc.status == 404:
                raise self._not_found(ref) from None
            raise

    def publish(self, owner: str, name: str, paths: list[Path], *, private: bool | None,
                progress: Callable[[int], None] | None = None) -> tuple[int, dict[str, Any]]:
        """Upload a release's files in one multipart request, streamed from disk."""
        handles: list[BinaryIO] = []
        try:
            files = []
            for p in paths:
                fh: BinaryIO = open(p, "rb")
                handles.append(fh)
                files.append(("files", (p.name, _ProgressReader(fh, progress), "application/octet-stream")))
            data = {} if private is None else {"private": "true" if private else "false"}
            resp = self.request(
                "POST", f"/api/v1/environments/{owner}/{name}/versions",
                files=files, data=data, expect=(200, 201), timeout=httpx.Timeout(600.0, connect=10.0),
            )
            return resp.status_code, resp.json()
        finally:
            for fh in handles:
                fh.close()

    def set_visibility(self, ref: EnvRef, *, private: bool) -> dict[str, Any]:
        """Make the environment private or public (its owner only; every version goes with it)."""
        try:
            return self.json("PATCH", f"/api/v1/environments/{ref.owner}/{ref.name}", json={"private": private})
        except HubClientError as exc:
            if exc.status == 404:
                raise self._not_found(ref) from None
            raise

    def yank(self, ref: EnvRef, reason: str) -> dict[str, Any]:
        return self.json("POST", f"/api/v1/environments/{ref.owner}/{ref.name}/versions/{ref.version}/yank",
                         json={"reason": reason})

    def unyank(self, ref: EnvRef) -> dict[str, Any]:
        return self.json("POST", f"/api/v1/environments/{ref.owner}/{ref.name}/versions/{ref.version}/unyank")

    def star(self, ref: EnvRef, on: bool = True) -> dict[str, Any]:
        return self.json("PUT" if on else "DELETE", f"/api/v1/environments/{ref.owner}/{ref.name}/star")

    def evals(self, ref: EnvRef) -> list[dict[str, Any]]:
        return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}/evals")

    def leaderboard(self, ref: EnvRef) -> list[dict[str, Any]]:
        return self.json("GET", f"/api/v1/environments/{ref.owner}/{ref.name}/leaderboard")

    def post_eval(self, ref: EnvRef, version: str, metadata: dict[str, Any],
                  summary: dict[str, Any]) -> dict[str, Any]:
        return self.json("POST", f"/api/v1/environments/{ref.owner}/{ref.name}/versions/{version}/evals",
                         json={"metadata": metadata, "summary": summary}, expect=(201,))

    # -------------------------------------------------------------------------------- files
    def download(self, url: str, dest: Path, *, expected_sha256: str | None = None) -> str:
        """Stream ``url`` (a hub file URL) to ``dest`` and return its sha256.

        The token is sent only when the URL is on the hub's own host (never to a download mirror).
        A digest mismatch deletes the partial file and raises.
        """
        import hashlib

        from verifiers.hub_client.files import MAX_DOWNLOAD_BYTES

        if not isinstance(url, str) or not url:
            raise HubClientError(f"the hub sent no download URL for {dest.name}")
        try:
            absolute = httpx.URL(self.config.url).join(url)
        except (httpx.InvalidURL, ValueError):
            raise HubClientError(f"the hub sent an invalid download URL {url[:120]!r}") from None
        if absolute.scheme not in ("http", "https"):
            raise HubClientError(f"the hub sent a download URL that is not http(s): {url[:120]!r}")
        hub = httpx.URL(self.config.url)
        same_host = (absolute.scheme, absolute.host, absolute.port) == (hub.scheme, hub.host, hub.port)
        # Another host (a mirror, a CDN) gets a client that never held the token.
        http = self._http if same_host else httpx.Client(timeout=self._http.timeout, follow_redirects=False)
        h = hashlib.sha256()
        tmp = dest.with_name(dest.name + ".part")
        try:
            with http.stream("GET", absolute) as resp:
                if resp.status_code != 200:
                    resp.read()
                    self._raise(resp)
                declared = resp.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > MAX_DOWNLOAD_BYTES:
                    raise HubClientError(f"refusing {dest.name}: the hub announces {int(declared)} bytes "
                                         f"(limit {MAX_DOWNLOAD_BYTES >> 20} MiB)")
                size = 0
                with open(tmp, "wb") as out:
                    for chunk in resp.iter_bytes(1 << 16):
                        size += len(chunk)
                        if size > MAX_DOWNLOAD_BYTES:
                            raise HubClientError(f"refusing {dest.name}: more than {MAX_DOWNLOAD_BYTES >> 20} MiB")
                        h.update(chunk)
                        out.write(chunk)
        except httpx.TransportError as exc:
            tmp.unlink(missing_ok=True)
            raise HubClientError(f"download of {absolute} failed ({type(exc).__name__})") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        finally:
            if http is not self._http:
                http.close()
        digest = h.hexdigest()
        if expected_sha256 and digest != expected_sha256.lower():
            tmp.unlink(missing_ok=True)
            raise HubClientError(
                f"sha256 mismatch for {dest.name}: expected {expected_sha256}, got {digest}; "
                "the file on the hub is not the one that was published or locked"
            )
        tmp.replace(dest)
        return digest


class _ProgressReader:
    """A file wrapper that reports bytes read, so uploads can show progress while streaming."""

    def __init__(self, fh: BinaryIO, callback: Callable[[int], None] | None) -> None:
        self._fh = fh
        self._cb = callback

    def read(self, size: int = -1) -> bytes:
        chunk = self._fh.read(size)
        if chunk and self._cb:
            self._cb(len(chunk))
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(1 << 16):
            yield chunk

    def seek(self, *args: Any) -> int:
        return self._fh.seek(*args)

    def tell(self) -> int:
        return self._fh.tell()
