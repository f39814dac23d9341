"""``verifiers.v1.utils.git`` on a real git checkout in the real subprocess runtime: the agent's
patch (its commits and its untracked files included, the repository's own untracked files left
out), git's refusal recorded rather than raised, the size cap, and the patch written for a
second box."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from verifiers.v1.runtimes import SubprocessConfig, SubprocessRuntime
from verifiers.v1.utils import git

GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


class _Trace:
    def __init__(self) -> None:
        self.info: dict = {}


def _sh(cwd: Path, *args: str) -> str:
    return subprocess.run(args, cwd=cwd, env={"PATH": "/usr/bin:/bin", **GIT_ENV}, check=True,
                          capture_output=True, text=True).stdout  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    _sh(root, "git", "init", "-q", "-b", "main")
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (root / "test_calc.py").write_text("from calc import add\n\ndef test_add():\n    assert add(2, 2) == 4\n")
    _sh(root, "git", "add", "-A")
    _sh(root, "git", "commit", "-q", "-m", "base")
    (root / "shipped.txt").write_text("came with the image\n")  # untracked before the agent ran
    return root


def _runtime(root: Path) -> SubprocessRuntime:
    return SubprocessRuntime(SubprocessConfig(workdir=root, env=GIT_ENV))


def test_the_patch_holds_the_agents_edits_and_commits_but_not_the_repositorys_untracked_files(repo: Path, tmp_path: Path) -> None:
    async def main() -> dict:
        rt = _runtime(repo)
        await rt.start()
        base = await git.resolve_head(rt)
        shipped = await git.snapshot_untracked(rt)
        # the agent: fixes the bug, commits it, adds a new file and leaves it untracked
        await rt.run("sed -i 's/a - b/a + b/' calc.py && git commit -qam fix && echo note > NOTES.md")
        trace = _Trace()
        await git.capture_patch(trace, rt, base_commit=base, ignore=shipped, write_path="artifacts/patch.diff")
        assert (await rt.read("artifacts/patch.diff")).decode() == trace.info["patch"]
        status = (await rt.run(["git", "diff", "--cached", "--name-only"])).stdout
        assert status == "", "the capture left files staged"
        await rt.stop()
        return {"base": base, "shipped": shipped, "info": trace.info}

    out = asyncio.run(main())
    assert len(out["base"]) == 40 and out["shipped"] == ["shipped.txt"]
    patch = out["info"]["patch"]
    assert "+    return a + b" in patch and "NOTES.md" in patch and "shipped.txt" not in patch
    assert "patch_error" not in out["info"] and "patch_truncated" not in out["info"]
    # the patch applies to a fresh checkout of the base commit
    fresh = tmp_path / "fresh"
    _sh(tmp_path, "git", "clone", "-q", str(repo), str(fresh))
    _sh(fresh, "git", "checkout", "-q", out["base"])
    (fresh / "p.diff").write_text(patch)
    _sh(fresh, "git", "apply", "p.diff")
    assert "a + b" in (fresh / "calc.py").read_text()


def test_without_a_base_commit_the_agents_commits_are_missed(repo: Path) -> None:
    async def main() -> str:
        rt = _runtime(repo)
        await rt.start()
        await rt.run("sed -i 's/a - b/a + b/' calc.py && git commit -qam fix")
        trace = _Trace()
        await git.capture_patch(trace, rt, ignore=["shipped.txt"])
        return trace.info["patch"]

    assert asyncio.run(main()) == ""


def test_git_refusing_is_recorded_and_the_rollout_goes_on(repo: Path) -> None:
    async def main() -> dict:
        rt = _runtime(repo)
        await rt.start()
        (repo / ".git" / "index.lock").write_text("")  # a killed agent git command left its lock
        (repo / "calc.py").write_text("changed\n")
        trace = _Trace()
        await git.capture_patch(trace, rt, base_commit=await git.resolve_head(rt))
        return trace.info

    info = asyncio.run(main())
    assert "patch" not in info and info["patch_error"].startswith("exit=") and "index.lock" in info["patch_error"]


def test_a_patch_past_the_cap_is_cut_and_marked(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(git, "PATCH_CAP_BYTES", 500)

    async def main() -> dict:
        rt = _runtime(repo)
        await rt.start()
        (repo / "big.txt").write_text("x" * 5000 + "\n")
        trace = _Trace()
        await git.capture_patch(trace, rt, base_commit=await git.resolve_head(rt))
        return trace.info

    info = asyncio.run(main())
    assert info["patch_truncated"] is True and len(info["patch"].encode()) == 500


def test_outside_a_repository_there_is_no_head_and_no_untracked_list(tmp_path: Path) -> None:
    async def main() -> tuple:
        rt = SubprocessRuntime(SubprocessConfig(workdir=tmp_path, env={"GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}))
        await rt.start()
        return await git.resolve_head(rt), await git.snapshot_untracked(rt)

    assert asyncio.run(main()) == ("", [])


def test_a_box_that_stops_answering_raises_instead_of_scoring() -> None:
    from verifiers.v1.errors import SandboxError
    from verifiers.v1.runtimes import ProgramResult

    class Dead:
        async def run(self, argv, env=None):
            return ProgramResult(137, "", "container is not running")

    with pytest.raises(SandboxError, match="no longer answers"):
        asyncio.run(git.capture_patch(_Trace(), Dead(), base_commit="abc"))
