"""``verifiers.utils.async_utils.wait_for``: a time limit that never loses a cancellation.

``vf train`` ignored its Ctrl-C when the signal met an env server's health reply: Python 3.11's
``asyncio.wait_for`` returns a result that lands in the same loop iteration as a cancellation of
the waiting task, and the cancellation is gone (``asyncio.run`` sends exactly one). The project's
code uses this helper instead (the lint bans ``asyncio.wait_for`` outside tests)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from verifiers.utils.async_utils import wait_for

ROOT = Path(__file__).resolve().parents[2]


async def _cancel_as_the_result_lands(waiter) -> asyncio.Task:
    future = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(waiter(future, 5))
    await asyncio.sleep(0)  # the task now waits on the future
    future.set_result("reply")
    task.cancel()  # the same loop iteration, as a Ctrl-C meeting a reply
    await asyncio.gather(task, return_exceptions=True)
    return task


async def test_a_cancellation_that_meets_the_result_is_kept():
    assert (await _cancel_as_the_result_lands(wait_for)).cancelled()
    if sys.version_info < (3, 12):  # the bug this guards against: asyncio's own loses it on 3.11
        assert (await _cancel_as_the_result_lands(asyncio.wait_for)).result() == "reply"


async def test_a_cancellation_of_a_coroutine_under_a_limit_reaches_it():
    seen = []

    async def work():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = asyncio.ensure_future(wait_for(work(), 5))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_the_limit_raises_timeout_error_and_cancels_what_it_waited_on():
    future = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await wait_for(future, 0.05)
    assert future.cancelled()
    with pytest.raises(TimeoutError):
        await wait_for(asyncio.sleep(10), 0)
    assert await wait_for(asyncio.sleep(0.01, "done"), None) == "done"  # no limit
    assert await wait_for(asyncio.sleep(0, "done"), 5) == "done"


def test_the_lint_bans_asyncio_wait_for_in_the_project_code():
    """The ban is what keeps the class out: a new ``asyncio.wait_for`` in the package fails ``make test``."""
    code = "import asyncio\n\n\nasync def f(x):\n    return await asyncio.wait_for(x, 1)\n"
    ruff = str(Path(sys.executable).parent / "ruff")
    for path, banned in (("verifiers/engine/probe.py", True), ("hub/probe.py", True), ("tests/probe.py", False)):
        out = subprocess.run([ruff, "check", "--no-cache", "--stdin-filename", path, "-"], input=code,
                             capture_output=True, text=True, cwd=ROOT, timeout=60)
        assert ("TID251" in out.stdout) is banned and out.returncode == int(banned), out.stdout + out.stderr
