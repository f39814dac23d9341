"""Tool folders (``verifiers.sandbox.toolenv``): built once by uv inside bubblewrap from a package
index (a loopback one here: no internet), cached by hash, published whole or not at all, and
mounted read-only into sandboxes."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from pathlib import Path

import pytest

from tests.sandbox.conftest import ensure_bwrap
from tests.v1.test_runtimes import _index, _wheel
from verifiers.sandbox import Sandbox
from verifiers.sandbox.toolenv import RECORD, ensure_toolenv, normalized_requirements, toolenv_key
from verifiers.sandbox.types import SandboxError


@pytest.fixture
def roots(monkeypatch, tmp_path):
    ensure_bwrap()
    tools = Path(tempfile.mkdtemp(prefix="vf-toolenv-test-"))
    tools.chmod(0o711)
    box = Path(tempfile.mkdtemp(prefix="vf-toolenv-sb-"))
    box.chmod(0o711)
    monkeypatch.setenv("VF_TOOLENV_DIR", str(tools))
    monkeypatch.setenv("VF_SANDBOX_DIR", str(box))
    yield tools
    for p in (tools, box):
        os.system(f"rm -rf -- '{p}'")


def test_requirements_are_plain_requirements_only() -> None:
    assert normalized_requirements([" b==1 ", "a", "a", "# note", ""]) == ("a", "b==1")
    for bad in ["--index-url=http://evil", "-e .", "a\nb", "../x", "", "x" * 400]:
        with pytest.raises(ValueError):
            normalized_requirements([bad] if bad else [])
    assert toolenv_key(["a", "b"]) == toolenv_key(["b", "a"]) != toolenv_key(["a"])
    from verifiers.sandbox import toolenv
    from verifiers.v1 import runtimes

    # prepare_uv_script mounts uv, its cache and the CA bundle where the builder does
    assert (runtimes._UV_INSIDE, runtimes._CACHE_INSIDE, runtimes._CA_INSIDE) == (toolenv.UV_INSIDE, toolenv.CACHE_INSIDE, toolenv.CA_INSIDE)


async def test_built_once_for_concurrent_callers_published_whole_and_mounted_read_only(roots, tmp_path) -> None:
    wheel = _wheel(tmp_path)
    with _index(wheel) as index:
        key = toolenv_key(["vfprobe==1.0"], index_url=index)
        # a builder killed halfway left its staging folder, and a folder without its record
        (roots / f".build-{key}-dead").mkdir()
        (roots / key).mkdir()
        (roots / key / "half").write_text("x")
        a, b = await asyncio.gather(*(ensure_toolenv(["vfprobe==1.0"], registries=[index], index_url=index, timeout=120) for _ in range(2)))
    assert a == b and a.key == key and a.inside == f"/opt/tools/{key}"
    record = json.loads((a.host / RECORD).read_text())
    assert record["key"] == key and record["requirements"] == ["vfprobe==1.0"]
    assert not (a.host / "half").exists() and not list(roots.glob(".build-*"))  # rebuilt; nothing half-built kept
    assert (a.host.stat().st_uid, a.host.stat().st_mode & 0o022) == (os.getuid(), 0)
    # found by its hash afterwards, with no index at all
    again = await ensure_toolenv(["vfprobe==1.0"], registries=[], index_url=index)
    assert json.loads((again.host / RECORD).read_text())["built_at"] == record["built_at"]
    sb = Sandbox("bwrap", ro_binds=a.bind, timeout=30)
    r = await sb.run([a.python, "-c", "import vfprobe, sys; print(vfprobe.VALUE, sys.prefix)"])
    assert r.ok and r.stdout.split() == ["42", a.inside]
    r = await sb.run(f"touch {a.inside}/x || echo refused")
    assert "refused" in r.stdout and not (a.host / "x").exists()


async def test_a_failed_build_is_one_line_and_leaves_nothing(roots, tmp_path) -> None:
    with _index(_wheel(tmp_path)) as index:
        with pytest.raises(SandboxError) as err:
            await ensure_toolenv(["vf-no-such-package==9"], registries=[index], index_url=index, timeout=120)
    assert "\n" not in str(err.value) and "vf-no-such-package" in str(err.value)
    assert [p.name for p in roots.iterdir() if not p.name.endswith(".lock") and p.name != "uv-cache"] == []


async def test_a_cancelled_caller_does_not_cancel_the_build(roots, tmp_path) -> None:
    # the registry takes 3 s to send the wheel: the caller is cancelled while the build waits on it
    # (on a quiet machine a build from a fast local index can finish before the cancel)
    with _index(_wheel(tmp_path), delay=3.0) as index:
        first = asyncio.ensure_future(ensure_toolenv(["vfprobe==1.0"], registries=[index], index_url=index, timeout=120))
        await asyncio.sleep(0.3)  # the build has started in its sandbox
        assert not first.done()
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        from verifiers.sandbox import toolenv

        build = toolenv._building[roots / toolenv_key(["vfprobe==1.0"], index_url=index)]
        assert not build.done()  # still building, for whoever asks next
        env = await ensure_toolenv(["vfprobe==1.0"], registries=[index], index_url=index, timeout=120)  # joins it
    assert build.done() and not build.cancelled() and build.exception() is None and not toolenv._building
    assert json.loads((env.host / RECORD).read_text())["key"] == env.key and not list(roots.glob(".build-*"))
