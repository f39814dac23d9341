"""Fuzz the hub's OpenAPI schema with schemathesis: no generated request may get a 5xx answer.

The hub runs as the real server (``python -m hub serve`` subprocess) with some content in it (users,
a public and a private environment with files, an eval result). Every operation of ``/openapi.json``
is exercised with a bounded number of generated requests, once anonymously and once with a user's
write token; the authenticated run also generates cases whose path names real entities (owner,
environment, version, file), so that handlers get past their 404 and meet fuzzed bodies and queries.

(schemathesis's own pytest plugin reads a private pytest attribute that pytest 9 removed, so the
operations are driven here through its documented ``as_strategy`` + hypothesis API.)
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from hub.testing import HubProcess, run_hub
from tests.support.envpkg import build_env_package

pytestmark = pytest.mark.slow

# Examples per operation and run (VF_FUZZ_EXAMPLES overrides): ~37 operations x 2 runs take ~12 s on
# 2 idle cores and stay under two minutes on a heavily loaded machine.
MAX_EXAMPLES = int(os.environ.get("VF_FUZZ_EXAMPLES", "30"))

FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests on every run: a failure reproduces
    database=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@dataclass
class Live:
    hub: HubProcess
    token: str
    real: dict[str, str]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    root = tmp_path_factory.mktemp("hub-fuzz")
    hub = run_hub(root / "data")
    try:
        with hub.client(hub.admin_token) as c:
            token = c.post("/api/v1/users", json={"name": "alice"}).json()["token"]
            c.post("/api/v1/users", json={"name": "bob"})
        with hub.client(token) as c:
            built = {}
            for name, private in (("fuzz-public", False), ("fuzz-private", True)):
                pkg = built[name] = build_env_package(root / name, name, "1.0.0", tags=["fuzz"])
                files = [
                    ("files", (p.name, p.read_bytes(), "application/octet-stream"))
                    for p in (pkg.wheel, pkg.sdist)
                ]
                r = c.post(
                    f"/api/v1/environments/alice/{name}/versions",
                    files=files,
                    data={"private": "true" if private else "false"},
                )
                assert r.status_code == 201, r.text
            r = c.post(
                "/api/v1/environments/alice/fuzz-public/versions/1.0.0/evals",
                json={"metadata": {"model": "m", "avg_reward": 0.5}, "summary": {}},
            )
            assert r.status_code == 201, r.text
            c.post("/api/v1/orgs", json={"name": "fuzzorg"})
        wheel = built["fuzz-public"].wheel
        real = {
            "owner": "alice",
            "name": "fuzz-public",
            "version": "1.0.0",
            "project": "fuzz-public",
            "org": "fuzzorg",
            "user": "bob",
            "path": "pyproject.toml",
            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
            "filename": wheel.name,
        }
        real["prefix"] = real["sha256"][:2]
        yield Live(hub, token, real)
    finally:
        hub.stop()


@pytest.fixture(scope="module")
def hub_schema(live: Live) -> schemathesis.BaseSchema:
    schema = schemathesis.openapi.from_url(live.hub.url + "/openapi.json", timeout=30)
    return schema


def fuzz(schema: schemathesis.BaseSchema, live: Live, token: str | None) -> tuple[Counter[int], list[str]]:
    """Run every operation with generated requests; return (status code counts, failure descriptions).

    Positive cases (valid per the schema) and negative ones (deliberately invalid) are both sent: a
    malformed request must be a 4xx, never a crash. With a token, cases are also generated with the
    path pointing at real entities.
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = 0
    for result in schema.get_all_operations():
        op = result.ok()
        if token and op.method.upper() == "DELETE" and "/tokens/" in op.path:
            continue  # would revoke the very token this run authenticates with
        operations += 1
        strategies = [op.as_strategy(GenerationMode.POSITIVE), op.as_strategy(GenerationMode.NEGATIVE)]
        path_names = [p.name for p in op.path_parameters]
        if token and path_names and all(n in live.real for n in path_names):
            fixed = {n: live.real[n] for n in path_names}
            strategies += [
                op.as_strategy(GenerationMode.POSITIVE, path_parameters=fixed),
                op.as_strategy(GenerationMode.NEGATIVE, path_parameters=fixed),
            ]

        @FUZZ_SETTINGS
        @given(case=st.one_of(*strategies))
        def run(case: schemathesis.Case) -> None:
            response = case.call_and_validate(checks=[not_a_server_error], headers=headers, timeout=30)
            statuses[response.status_code] += 1

        try:
            run()
        except Exception as exc:  # hypothesis re-raises the (shrunk) failing case's error
            failures.append(f"{op.method.upper()} {op.path}: {type(exc).__name__}: {str(exc)[:2000]}")
    assert operations >= 30, f"only {operations} operations found in the schema"
    print(f"statuses ({'token' if token else 'anonymous'}): {sorted(statuses.items())}")
    return statuses, failures


def test_anonymous_requests_never_get_5xx(hub_schema: schemathesis.BaseSchema, live: Live) -> None:
    statuses, failures = fuzz(hub_schema, live, None)
    assert not failures, "\n\n".join(failures)
    assert sum(statuses.values()) >= 30 * MAX_EXAMPLES // 2
    assert statuses[401] > 0 and statuses[200] > 0  # writes refused, public reads served


def test_authenticated_requests_never_get_5xx(hub_schema: schemathesis.BaseSchema, live: Live) -> None:
    statuses, failures = fuzz(hub_schema, live, live.token)
    assert not failures, "\n\n".join(failures)
    assert sum(statuses.values()) >= 30 * MAX_EXAMPLES // 2
    # The real-path cases reached real handlers: successes beyond the list/health endpoints.
    assert sum(n for code, n in statuses.items() if 200 <= code < 300) >= 40  # anonymous runs get ~10


def test_the_hub_is_healthy_after_fuzzing(live: Live) -> None:
    """After both runs the server still answers and still serves the real environment intact."""
    with live.hub.client(live.token) as c:  # the owner's view: fuzzing may have made it private
        assert c.get("/healthz").status_code == 200
        r = c.get("/simple/fuzz-public/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        assert r.status_code == 200
        assert [f["filename"] for f in r.json()["files"] if f["filename"].endswith(".whl")] == [
            live.real["filename"]
        ]
