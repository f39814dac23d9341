"""The verdict that leaves the sandbox is hostile input (issue 22, item 1): the worker reads one
tagged line, bounded, against a strict schema; the hub refuses a report outside its own schema."""

from __future__ import annotations

import json

from verifiers.hub_client.check_worker import MAX_VERDICT_BYTES, clean_environment, parse_verdict

TAG = "VF-CHECK-VERDICT-abc"


def _line(doc: object) -> str:
    return f"noise\n{TAG} {json.dumps(doc)}\n"


def test_a_well_formed_verdict_keeps_only_its_schema() -> None:
    doc = {
        "ok": True,
        "checks": [{"name": "load", "ok": True, "skipped": False, "detail": "d" * 5000, "extra": "x"}],
        "rollouts": [{"reward": 1.0, "completion": "a huge transcript"}, {"reward": float("nan")}],
        "replies": ["<answer>4</answer>"],
        "duration_s": 1.5,
        "python_version": "3.11.2",
        "verifiers_version": "1.0.0",
        "worker": "host:1",
        "anything": {"deep": [1, 2, 3]},
    }
    v = parse_verdict(_line(doc), TAG)
    assert v is not None
    assert set(v) == {"ok", "checks", "rollouts", "replies", "duration_s", "python_version", "verifiers_version"}
    assert v["checks"] == [{"name": "load", "ok": True, "skipped": False, "detail": "d" * 2000}]
    assert v["rollouts"] == [{"reward": 1.0}, {"reward": None}]  # a NaN reward is no number


def test_malformed_verdicts_are_no_verdict() -> None:
    assert parse_verdict("no tag here\n", TAG) is None
    assert parse_verdict(f"{TAG} not json\n", TAG) is None
    assert parse_verdict(_line([1, 2]), TAG) is None
    assert parse_verdict(_line({"ok": "yes"}), TAG) is None  # ok must be a boolean
    assert parse_verdict(f"{TAG} " + "[" * 200_000 + "\n", TAG) is None  # too deep to parse
    huge = {"ok": True, "replies": ["x" * (MAX_VERDICT_BYTES + 10)]}
    assert parse_verdict(_line(huge), TAG) is None  # larger than the bound
    # a forged line with another tag does not count; the last tagged line does
    forged = f"VF-CHECK-VERDICT-other {json.dumps({'ok': True})}\n" + _line({"ok": False})
    v = parse_verdict(forged, TAG)
    assert v is not None and v["ok"] is False


def test_the_workers_environment_is_allow_listed() -> None:
    env = clean_environment(
        {"PATH": "/usr/bin", "VF_HUB_WORKER_TOKEN": "vfh_x", "VF_HUB_ADMIN_TOKEN": "vfh_y", "PIP_INDEX_URL": "u",
         "HTTPS_PROXY": "p", "UV_INDEX_URL": "u", "AWS_SECRET_ACCESS_KEY": "k", "PIP_CONFIG_FILE": "/etc/evil.conf",
         "OPERATOR_CA": "c"},
        keep=["OPERATOR_CA"],
    )  # fmt: skip
    assert env == {"PATH": "/usr/bin", "OPERATOR_CA": "c", "PIP_CONFIG_FILE": "/dev/null", "PIP_NO_INPUT": "1",
                   "PYTHONNOUSERSITE": "1"}  # fmt: skip


def test_the_setup_phase_trusts_the_hosts_ca_store_first(tmp_path, monkeypatch) -> None:
    """Behind a TLS-inspecting proxy only the host's trust store holds the proxy's CA: the sandbox's
    pip gets that store (SSL_CERT_FILE, kept by the worker's allow-list), not certifi's public roots."""
    from verifiers.hub_client import check_worker

    store = tmp_path / "host-ca.pem"
    store.write_bytes(b"-----BEGIN CERTIFICATE-----\nhost store\n-----END CERTIFICATE-----\n")
    assert clean_environment({"SSL_CERT_FILE": str(store), "PIP_CERT": "/x"})["SSL_CERT_FILE"] == str(store)
    monkeypatch.setenv("SSL_CERT_FILE", str(store))
    assert check_worker._ca_bundle() == store.read_bytes()
    monkeypatch.delenv("SSL_CERT_FILE")
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    import ssl

    system = tmp_path / "system-ca.pem"
    system.write_bytes(b"-----BEGIN CERTIFICATE-----\nsystem store\n-----END CERTIFICATE-----\n")
    paths = ssl.get_default_verify_paths()
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: paths._replace(cafile=str(system)))
    assert check_worker._ca_bundle() == system.read_bytes()  # the system store, before certifi's copy
