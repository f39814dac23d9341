"""The agent's patch, taken from a git checkout in the rollout's runtime (``verifiers.v1.utils.git``
in the original; software-engineering tasksets call it from ``Task.finalize``).

At setup, before the agent runs: ``resolve_head`` (the commit to diff against) and
``snapshot_untracked`` (files that came with the repository and are not the agent's). Keep both in
host memory, where the agent cannot change them. At finalize, before scoring touches the
repository: ``capture_patch`` puts the cumulative diff (commits the agent made included, edits to
tests included: they show reward hacking) into ``trace.info["patch"]``.

Failures are told apart: git refusing (a stale ``index.lock``, a deleted ``.git``, a full disk: the
agent's own doing) is recorded as ``info["patch_error"]`` and the rollout scores as one that changed
nothing; a box that no longer answers raises ``SandboxError`` (infrastructure, not the policy).
"""

from __future__ import annotations

import secrets
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from verifiers.v1.errors import SandboxError

if TYPE_CHECKING:
    from verifiers.v1.trace import Trace

__all__ = ["PATCH_CAP_BYTES", "capture_patch", "resolve_head", "snapshot_untracked"]

PATCH_CAP_BYTES = 2_000_000
"""A captured patch longer than this is cut here and ``info["patch_truncated"]`` is set."""

# Runs in the box as `sh -c SCRIPT vf-capture-patch [IGNORED PATH ...]`, with the diff base in
# $VF_DIFF_BASE and the output files in $VF_PATCH_FULL / $VF_PATCH_CUT (fresh random names per call:
# concurrent rollouts on a shared filesystem never read each other's patch, and an agent cannot
# plant a FIFO at a name it cannot predict). Stage everything, unstage the ignored paths (only when
# there are some: `git reset --` with no path unstages everything), diff the index against the base,
# unstage, cut. Every step but the unstaging of ignored paths decides the exit status, and the final
# `git reset` runs whatever happened before it, so a failure never leaves the tree staged.
_SCRIPT = r"""
rm -f "$VF_PATCH_FULL" "$VF_PATCH_CUT"
git add -A; add=$?
if [ "$#" -gt 0 ]; then git reset -q -- "$@"; fi
git -c core.quotepath=off diff --cached --binary "$VF_DIFF_BASE" > "$VF_PATCH_FULL"; diff=$?
git reset -q; reset=$?
head -c "$VF_PATCH_LIMIT" "$VF_PATCH_FULL" > "$VF_PATCH_CUT"; cut=$?
rm -f "$VF_PATCH_FULL"
for rc in $add $diff $reset $cut; do [ "$rc" -ne 0 ] && exit "$rc"; done
exit 0
"""


def _env(env: dict | None, **extra: str) -> dict:
    return {**(env or {}), **extra}


async def resolve_head(runtime, env: dict | None = None) -> str:
    """The checkout's current commit, or ``""`` when git cannot tell (not a repository, no
    commit yet). Call it at the end of setup and pass it to ``capture_patch`` as
    ``base_commit``, so commits the agent makes stay inside the patch."""
    result = await runtime.run(["git", "rev-parse", "HEAD"], _env(env))
    if result.exit_code != 0:
        return ""
    return (result.stdout or "").strip()


async def snapshot_untracked(runtime, env: dict | None = None) -> list[str]:
    """The checkout's untracked, not ignored files, to pass to ``capture_patch`` as ``ignore``: they
    came with the repository, so the agent is not credited with them (a patch carrying them would
    not apply to a fresh copy of the same repository)."""
    result = await runtime.run(["git", "ls-files", "--others", "--exclude-standard", "-z"], _env(env))
    if result.exit_code != 0:
        return []
    return [path for path in (result.stdout or "").split("\0") if path]


async def capture_patch(
    trace: Trace,
    runtime,
    base_commit: str = "",
    env: dict | None = None,
    write_path: str | None = None,
    ignore: list[str] | None = None,
) -> None:
    """Put the agent's cumulative diff against ``base_commit`` (``HEAD`` when empty: commits the
    agent made are then missed) into ``trace.info["patch"]``, leaving out the ``ignore`` paths.

    A non-zero exit from git is recorded as ``trace.info["patch_error"]`` and the rollout goes on;
    when the box then does not answer a trivial command either, ``SandboxError`` is raised.
    ``write_path`` also writes the patch to that path in the box (for a task graded in a second
    box: point it under ``vf.ARTIFACTS_DIR``)."""
    nonce = secrets.token_hex(12)
    full, cut = f"/tmp/vf-patch-{nonce}.full", f"/tmp/vf-patch-{nonce}.diff"
    variables = _env(
        env,
        VF_DIFF_BASE=base_commit or "HEAD",
        VF_PATCH_FULL=full,
        VF_PATCH_CUT=cut,
        VF_PATCH_LIMIT=str(PATCH_CAP_BYTES + 1),
    )
    try:
        # the scripts a harness gave by their source (``.vf-scripts``) are never the agent's change
        result = await runtime.run(["sh", "-c", _SCRIPT, "vf-capture-patch", *(ignore or []), ".vf-scripts"], variables)
        if result.exit_code != 0:
            # some runtimes report a dead box as a failed command: one probe tells git's refusal
            # from a box that is gone
            probe = await runtime.run(["true"], _env(env))
            if probe.exit_code != 0:
                raise SandboxError(
                    f"capturing the patch failed and the box no longer answers: {(result.stderr or '').strip()[-300:]}"
                )
            trace.info["patch_error"] = f"exit={result.exit_code} {(result.stderr or '').strip()[-500:]}"
            return
        raw = await runtime.read(cut)
    finally:
        try:
            await runtime.run(["rm", "-f", full, cut], _env(env))
        except Exception:  # the files are temporary; failing to remove them must not fail the rollout
            pass
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if len(raw) > PATCH_CAP_BYTES:
        raw = raw[:PATCH_CAP_BYTES]
        trace.info["patch_truncated"] = True
    trace.info["patch"] = raw.decode("utf-8", errors="replace")
    if write_path is not None:
        await runtime.run(["mkdir", "-p", str(PurePosixPath(write_path).parent)], _env(env))
        await runtime.write(write_path, raw)
