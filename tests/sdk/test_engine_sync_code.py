"""Issue 23, round two of the engine's faults: synchronous environment code, abandoned tool threads,
unbounded cleanups, classic hook shapes, nested groups, rewards that return nothing, truthful stop
conditions.

Everything goes through ``env.evaluate`` against a real loopback server
(``tests.support.fault_server.FaultServer``); concurrency is proved with events, never elapsed time.
The ``GUARD`` bounds below only matter when the bug is back (the test then fails instead of hanging).
"""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import threading
import time
from typing import Any

import pytest

import verifiers as vf
from tests.support.fault_server import FaultServer, chat_body

from .test_engine_faults import ROWS, client_for, exact, tool_then_answer

#: Only reached when the code under test is broken; never a statement about speed.
GUARD = 30.0


# ----------------------------------------------------------------------------------------------
# item 18: a reward function that returns None
# ----------------------------------------------------------------------------------------------


async def test_a_reward_function_returning_none_is_a_reward_error() -> None:
    def forgot(completion, **kw):
        if completion[-1]["content"] == "ok":
            pass  # forgot the return

    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[forgot]))
    with FaultServer(chat_body("ok")) as srv:
        out = await env.evaluate(client_for(srv), "m")
    assert len(out.state) == 4
    for st in out.state:
        assert st["error"]["source"] == "reward:forgot" and st["error"]["type"] == "TypeError"
        assert "returned None" in st["error"]["message"]
    assert out["metadata"]["num_errors"] == 4


# ----------------------------------------------------------------------------------------------
# item 3: synchronous code must not stall the other rollouts
# ----------------------------------------------------------------------------------------------


async def test_a_blocking_sync_reward_does_not_stall_the_other_rollouts() -> None:
    """The first sync reward blocks until every other rollout has had its model reply: on the event
    loop it would block their requests too, and wait forever. The rewards queued behind it (the lane
    runs one at a time) are not charged for the wait: none times out, though the rewards together take
    longer than a rollout may."""
    n = len(ROWS) * 2
    with FaultServer(chat_body("ok")) as srv:
        first = threading.Lock()
        lead = {"taken": False}

        def slow(completion, **kw) -> float:
            with first:
                leader = not lead["taken"]
                lead["taken"] = True
            if leader:
                deadline = time.monotonic() + GUARD
                while len(srv.requests) < n:  # every other rollout's request went through meanwhile
                    assert time.monotonic() < deadline, "the other rollouts' requests stalled"
                    time.sleep(0.005)
            time.sleep(0.4)
            return 1.0

        env = vf.SingleTurnEnv(dataset=ROWS * 2, rubric=vf.Rubric(funcs=[slow]), timeout_seconds=2.0)
        out = await env.evaluate(client_for(srv), "m", max_concurrent=-1)
    assert [st["error"] for st in out.state] == [None] * n  # 8 x 0.4 s queued, yet no timeout
    assert [st["reward"] for st in out.state] == [1.0] * n


class _Lazy:
    """A module global filled on first use, in two steps with a pause between them (as a
    pronouncing dictionary is): code that runs side by side sees it half built."""

    def __init__(self) -> None:
        self.words: list[str] | None = None
        self.lookup: dict[str, int] | None = None

    def get(self, word: str) -> int:
        if self.words is None:
            self.words = ["ok", "no"]
            time.sleep(0.05)  # the window another thread falls into
            self.lookup = {w: i for i, w in enumerate(self.words)}
        return self.lookup.get(word, -1)  # AttributeError on None when the race is lost


async def test_sync_environment_code_runs_one_call_at_a_time_as_the_original_runs_it() -> None:
    """The original calls sync rewards and sync tools on its event-loop thread, so environments
    written for it may share unguarded state between them. Ours run them off the loop, but never two
    at once: every rollout here scores right, and at most one sync call was ever running."""
    lazy = _Lazy()
    live = {"now": 0, "most": 0}
    guard = threading.Lock()

    def counted(fn):
        def wrapper(*args, **kwargs):
            with guard:
                live["now"] += 1
                live["most"] = max(live["most"], live["now"])
            try:
                return fn(*args, **kwargs)
            finally:
                with guard:
                    live["now"] -= 1
        wrapper.__name__ = fn.__name__
        wrapper.__doc__ = fn.__doc__
        wrapper.__signature__ = inspect.signature(fn)
        return wrapper

    @counted
    def t() -> str:
        """A sync tool reading the shared table."""
        time.sleep(0.01)
        return str(lazy.get("ok"))

    @counted
    def known(completion, **kw) -> float:
        return 1.0 if lazy.get(completion[-1]["content"]) >= 0 else 0.0

    @counted
    def first_word(completion, **kw) -> float:
        return float(lazy.get("ok") == 0)

    env = vf.ToolEnv(tools=[t], dataset=ROWS * 2, rubric=vf.Rubric(funcs=[known, first_word]), tool_timeout=GUARD)
    with FaultServer(tool_then_answer) as srv:
        out = await env.evaluate(client_for(srv), "m", max_concurrent=-1)
    assert [st["error"] for st in out.state] == [None] * 8
    assert [st["reward"] for st in out.state] == [2.0] * 8
    assert all(m["content"] == "0" for st in out.state for m in st["completion"] if m["role"] == "tool")
    assert live["most"] == 1


async def test_vf_sync_workers_lets_thread_safe_sync_code_run_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator whose environment's sync code is thread-safe can widen the lane: every
    rollout's sync reward then waits until all of them run at once (with one at a time, the
    first would wait for the others forever)."""
    from verifiers.engine.threads import reset_sync_pool

    monkeypatch.setenv("VF_SYNC_WORKERS", "8")
    reset_sync_pool()
    try:
        started = threading.Barrier(len(ROWS) * 2, timeout=GUARD)

        def together(completion, **kw) -> float:
            started.wait()  # BrokenBarrierError (a reward error) if the others cannot start
            return 1.0

        env = vf.SingleTurnEnv(dataset=ROWS * 2, rubric=vf.Rubric(funcs=[together]), timeout_seconds=GUARD * 4)
        with FaultServer(chat_body("ok")) as srv:
            out = await env.evaluate(client_for(srv), "m", max_concurrent=-1)
        assert [st["error"] for st in out.state] == [None] * 8
        assert [st["reward"] for st in out.state] == [1.0] * 8
    finally:
        monkeypatch.delenv("VF_SYNC_WORKERS")
        reset_sync_pool()


def test_vf_sync_workers_must_be_a_positive_whole_number(monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.engine.threads import lane_width

    for bad, message in (("0", "at least 1"), ("two", "whole number")):
        monkeypatch.setenv("VF_SYNC_WORKERS", bad)
        with pytest.raises(ValueError, match=message):
            lane_width()
    monkeypatch.setenv("VF_SYNC_WORKERS", " 3 ")
    assert lane_width() == 3
    monkeypatch.delenv("VF_SYNC_WORKERS")
    assert lane_width() == 1


async def test_an_async_tool_that_blocks_past_tool_timeout_is_a_recorded_error() -> None:
    async def t() -> str:
        """An async tool doing blocking I/O: asyncio cannot interrupt it."""
        time.sleep(0.3)  # noqa: ASYNC251 - the fault under test
        return "late"

    env = vf.ToolEnv(tools=[t], dataset=ROWS[:2], rubric=vf.Rubric(funcs=[exact]), tool_timeout=0.05)
    with FaultServer(tool_then_answer) as srv:
        out = await env.evaluate(client_for(srv), "m")
    for st in out.state:
        assert st["error"]["type"] == "ToolTimeoutError" and st["error"]["source"] == "tool:t"
        assert "blocked the event loop" in st["error"]["message"]
        assert st["reward"] == 0.0
    env.close()


async def test_the_stall_watchdog_names_the_blocking_function() -> None:
    from verifiers.engine.threads import StallWatchdog, running

    dog = StallWatchdog(threshold=0.05)
    dog.start(asyncio.get_running_loop())
    try:
        with running("cleanup hook 'stuck'"):
            # block the loop until the watchdog has noticed (its thread sets the event's flag)
            while not dog.noticed.wait(GUARD / 100):
                pass
        await asyncio.sleep(0)
        await asyncio.to_thread(dog.wait_recorded, GUARD)
    finally:
        dog.stop()
    assert dog.stalls and dog.stalls[0]["function"] == "cleanup hook 'stuck'"


async def test_a_run_reports_a_sync_hook_that_blocked_the_event_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    from verifiers.engine.threads import StallWatchdog

    monkeypatch.setenv("VF_STALL_MS", "50")

    class Blocky(vf.SingleTurnEnv):
        @vf.cleanup
        def block(self, state) -> None:
            """A sync hook on the loop: blocks it until the run's watchdog has noticed."""
            dogs = list(StallWatchdog.live)
            deadline = time.monotonic() + GUARD
            while dogs and dogs[0].last_noticed != "cleanup hook 'block'" and time.monotonic() < deadline:
                time.sleep(0.005)

    env = Blocky(dataset=ROWS, rubric=vf.Rubric(funcs=[exact]))
    with FaultServer(chat_body("ok")) as srv:
        out = await env.evaluate(client_for(srv), "m", max_concurrent=1)
    assert out["metadata"]["num_errors"] == 0
    stalls = out["metadata"]["event_loop_stalls"]
    assert stalls["count"] >= 1 and "cleanup hook 'block'" in stalls["functions"]


# ----------------------------------------------------------------------------------------------
# item 4: abandoned sync tool calls must not starve new ones
# ----------------------------------------------------------------------------------------------


async def test_abandoned_sync_tool_calls_do_not_starve_new_ones() -> None:
    release = threading.Event()
    calls = {"started": 0}
    lock = threading.Lock()

    def t() -> str:
        """The first three calls block until the test ends; the rest return at once."""
        with lock:
            calls["started"] += 1
            n = calls["started"]
        if n <= 3:
            release.wait()
        return "ran"

    env = vf.ToolEnv(tools=[t], dataset=ROWS + ROWS[:2], rubric=vf.Rubric(funcs=[exact]), tool_timeout=0.1, max_workers=2)
    try:
        with FaultServer(tool_then_answer) as srv:
            out = await env.evaluate(client_for(srv), "m", max_concurrent=1)
    finally:
        release.set()
    states = sorted(out.state, key=lambda s: s["example_id"])
    assert calls["started"] == 6
    for st in states[:3]:  # abandoned: a recorded error, the model was told
        assert st["error"]["type"] == "ToolTimeoutError" and st["error"]["source"] == "tool:t"
        tool_msg = next(m for m in st["completion"] if m["role"] == "tool")
        assert "did not finish within 0.1 s" in tool_msg["content"]
    for st in states[3:]:
        tool_msg = next(m for m in st["completion"] if m["role"] == "tool")
        assert tool_msg["content"] == "ran" and st["error"] is None and st["reward"] == 1.0
    assert out["metadata"]["num_errors"] == 3
    env.close()


def test_the_pool_refuses_clearly_past_its_bound_of_abandoned_calls() -> None:
    from verifiers.engine.threads import DaemonThreadPool, PoolExhaustedError

    release = threading.Event()
    running_now = threading.Semaphore(0)

    def block() -> str:
        running_now.release()
        release.wait()
        return "done"

    pool = DaemonThreadPool(1, max_abandoned=2)
    try:
        for _ in range(2):
            fut = pool.submit(block)
            assert running_now.acquire(timeout=GUARD)
            pool.abandon(fut)
        assert pool.abandoned_threads == 2
        with pytest.raises(PoolExhaustedError, match="2 abandoned calls"):
            pool.submit(block)
        release.set()
        deadline = time.monotonic() + GUARD  # the abandoned threads leave the pool as they return
        while pool.abandoned_threads and time.monotonic() < deadline:
            time.sleep(0.01)
        # once abandoned calls return, new calls start again
        assert pool.submit(lambda: "again").result(timeout=GUARD) == "again"
    finally:
        release.set()
        pool.shutdown(wait=False)


# ----------------------------------------------------------------------------------------------
# item 6: cleanup hooks are bounded
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("after_timeout", [False, True])
async def test_a_cleanup_hook_that_never_returns_is_bounded_and_recorded(after_timeout: bool) -> None:
    class Stuck(vf.SingleTurnEnv):
        async def setup_state(self, state, **kw):
            if after_timeout:
                await asyncio.Event().wait()  # the rollout times out here
            return state

        @vf.cleanup
        async def never(self, state) -> None:
            await asyncio.Event().wait()

    env = Stuck(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[exact]), cleanup_timeout=0.1,
                timeout_seconds=0.2 if after_timeout else None)
    with FaultServer(chat_body("ok")) as srv:
        out = await asyncio.wait_for(env.evaluate(client_for(srv), "m"), GUARD)
    assert len(out.state) == 2
    for st in out.state:
        assert st["error"] is not None
        if after_timeout:  # the timeout is the rollout's error; the cleanup overrun is kept beside it
            assert st["error"]["source"] == "timeout"
            assert any(w["type"] == "CleanupTimeoutError" for w in st.get("warnings") or [])
        else:
            assert st["error"]["source"] == "cleanup" and st["error"]["type"] == "CleanupTimeoutError"


# ----------------------------------------------------------------------------------------------
# item 16: classic hook shapes
# ----------------------------------------------------------------------------------------------


async def test_sync_is_completed_and_sync_env_response_are_accepted() -> None:
    class Classic(vf.MultiTurnEnv):
        def is_completed(self, messages, state, **kw) -> bool:  # sync, as classic releases allowed
            return len(state["trajectory"]) >= 2

        def env_response(self, messages, state, **kw):  # sync OLD shape: (messages, state)
            return [{"role": "user", "content": "again"}], state

    env = Classic(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[exact]))
    with FaultServer(chat_body("ok")) as srv:
        out = await env.evaluate(client_for(srv), "m")
    for st in out.state:
        assert st["error"] is None and st["stop_condition"] == "is_completed"
        assert [m["role"] for m in st["completion"]] == ["assistant", "user", "assistant"]
        assert st["reward"] == 1.0


@pytest.mark.parametrize("reply", [42, [{"role": "user", "content": "x"}, 7]])
async def test_an_env_response_of_the_wrong_type_is_labelled_env_response(reply: Any) -> None:
    class Wrong(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kw):
            return reply

    env = Wrong(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[exact]), max_turns=3)
    with FaultServer(chat_body("ok")) as srv:
        out = await env.evaluate(client_for(srv), "m")
    for st in out.state:
        assert st["error"]["source"] == "env_response" and st["error"]["type"] == "TypeError"
        assert "env_response returned" in st["error"]["message"]
        assert [m["role"] for m in st["completion"]] == ["assistant"]  # nothing half-appended


# ----------------------------------------------------------------------------------------------
# item 15: nested EnvGroup
# ----------------------------------------------------------------------------------------------


async def test_a_nested_env_group_routes_through_the_inner_group() -> None:
    def one(completion, **kw) -> float:
        return 1.0

    def half(completion, **kw) -> float:
        return 0.5

    def quarter(completion, **kw) -> float:
        return 0.25

    a = vf.SingleTurnEnv(dataset=ROWS[:1], rubric=vf.Rubric(funcs=[one]))
    b = vf.SingleTurnEnv(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[half]))
    c = vf.SingleTurnEnv(dataset=ROWS[:3], rubric=vf.Rubric(funcs=[quarter]))
    inner = vf.EnvGroup([a, b], env_names=["a", "b"])
    outer = vf.EnvGroup([inner, c], env_names=["inner", "c"])
    with FaultServer(chat_body("ok")) as srv:
        out = await outer.evaluate(client_for(srv), "m")
    assert len(out.state) == 6 and out["metadata"]["num_errors"] == 0
    rewards = sorted(st["reward"] for st in out.state)
    assert rewards == [0.25, 0.25, 0.25, 0.5, 0.5, 1.0]
    routes = sorted(str(st["info"]["env_id"]) for st in out.state)
    assert routes == ["['inner', 'a']", "['inner', 'b']", "['inner', 'b']", "c", "c", "c"]


# ----------------------------------------------------------------------------------------------
# "What misled a new user": single-turn runs reported max_turns_reached for every rollout
# ----------------------------------------------------------------------------------------------


async def test_a_single_turn_rollout_that_answered_stops_as_answered(tmp_path) -> None:
    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[exact]))
    with FaultServer(chat_body("ok")) as srv:
        out = await env.evaluate(client_for(srv), "m", results_path=tmp_path / "run")
    assert {st["stop_condition"] for st in out.state} == {"answered"}
    assert out["metadata"]["stop_conditions"] == {"answered": 4} and out["metadata"]["num_truncated"] == 0


# ----------------------------------------------------------------------------------------------
# sync code where the original runs it: on the main thread
# ----------------------------------------------------------------------------------------------


def test_evaluate_sync_runs_sync_code_on_the_main_thread_without_stalling_the_loop() -> None:
    """From the main thread, ``evaluate_sync`` runs the loop in a helper thread and the sync code on
    the main thread, where the original runs it: a reward that arms a signal handler (math-verify's
    default timeouts do) works. The first reward holds the main thread until every rollout has had
    its first model reply: the loop went on meanwhile (the second replies need the lane for
    their tool calls first). Sync tools, which get model-written
    arguments, run in a daemon thread while the main thread holds the lane for them."""
    n = len(ROWS) * 2
    seen: set[str] = set()
    tools: set[tuple[str, bool]] = set()
    lead = {"taken": False}

    def armed() -> None:
        previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # ValueError off the main thread
        signal.signal(signal.SIGALRM, previous)
        seen.add(threading.current_thread().name)

    def t() -> str:
        """A sync tool."""
        tools.add((threading.current_thread().name, threading.current_thread().daemon))
        return "ok"

    with FaultServer(tool_then_answer) as srv:

        def scored(completion, **kw) -> float:
            armed()
            if not lead["taken"]:
                lead["taken"] = True  # one call at a time: no lock needed
                deadline = time.monotonic() + GUARD
                while len(srv.requests) < n + 1:  # its own two, every other one's first
                    assert time.monotonic() < deadline, "the other rollouts stalled"
                    time.sleep(0.005)
            return 1.0

        env = vf.ToolEnv(tools=[t], dataset=ROWS * 2, rubric=vf.Rubric(funcs=[scored]), tool_timeout=GUARD)
        out = env.evaluate_sync(client_for(srv), "m", max_concurrent=-1)
    assert [st["error"] for st in out.state] == [None] * n
    assert [st["reward"] for st in out.state] == [1.0] * n
    assert seen == {threading.main_thread().name}
    assert tools and all(daemon and name != threading.main_thread().name for name, daemon in tools)


def test_ctrl_c_during_evaluate_sync_cancels_the_run_and_raises_afterwards() -> None:
    """The first Ctrl-C lands in whatever sync function holds the main thread; it must not become
    that rollout's error: the run is cancelled and ``KeyboardInterrupt`` raised once it unwound."""
    calls = {"n": 0}

    def interrupts(completion, **kw) -> float:
        calls["n"] += 1
        if calls["n"] == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return 1.0

    def on_main(completion, **kw) -> float:
        return float(threading.current_thread() is threading.main_thread())

    # Python's own Ctrl-C handler, as in a terminal (a runner started in the background, e.g.
    # `nohup ... &`, hands its children SIGINT ignored)
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with FaultServer(chat_body("ok")) as srv:
            env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[interrupts]))
            with pytest.raises(KeyboardInterrupt):
                env.evaluate_sync(client_for(srv), "m", max_concurrent=1)
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back as it was
            # the lane is whole afterwards: the next run scores, on the main thread again
            again = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[on_main])).evaluate_sync(client_for(srv), "m")
    finally:
        signal.signal(signal.SIGINT, inherited)
    assert calls["n"] < len(ROWS)  # cancelled: not every rollout was scored
    assert [st["error"] for st in again.state] == [None] * 4 and [st["reward"] for st in again.state] == [1.0] * 4


def test_an_abandoned_sync_reward_on_the_main_thread_is_interrupted_and_the_main_thread_goes_on() -> None:
    """A sync reward that never returns holds the main thread; when its rollout times out it is
    interrupted there (``AbandonedCall``), and the main thread goes on running the lane: the later
    sync code, which needs the main thread, still runs there."""
    interrupted: list[str] = []
    seen: set[str] = set()

    def scored(completion, **kw) -> float:
        previous = signal.signal(signal.SIGALRM, signal.SIG_IGN)  # ValueError off the main thread
        signal.signal(signal.SIGALRM, previous)
        seen.add(threading.current_thread().name)
        if not interrupted:
            try:
                threading.Event().wait()
            except BaseException as exc:
                interrupted.append(type(exc).__name__)
                raise
        return 1.0

    env = vf.SingleTurnEnv(dataset=ROWS, rubric=vf.Rubric(funcs=[scored]), timeout_seconds=0.5)
    with FaultServer(chat_body("ok")) as srv:
        out = env.evaluate_sync(client_for(srv), "m", max_concurrent=1)
    assert interrupted == ["AbandonedCall"]
    errors = [st["error"] and st["error"]["type"] for st in out.state]
    assert errors.count("TimeoutError") == 1 and errors.count(None) == 3
    assert seen == {threading.main_thread().name}
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # put back


def test_a_sync_tool_never_holds_the_main_thread() -> None:
    """Tools get model-written arguments: under ``evaluate_sync`` a sync tool runs in a daemon
    thread while the main thread holds the lane for it, so one that never returns (even one that
    swallows every exception) is left behind at its ``tool_timeout`` and the run returns."""
    release = threading.Event()
    where: list[tuple[str, bool]] = []

    def t() -> str:
        """Blocks until the test ends the first time, swallowing anything raised into it."""
        where.append((threading.current_thread().name, threading.current_thread().daemon))
        if len(where) == 1:
            while not release.is_set():
                try:
                    release.wait(0.05)
                except BaseException:
                    pass
        return "ok"

    env = vf.ToolEnv(tools=[t], dataset=ROWS, rubric=vf.Rubric(funcs=[exact]), tool_timeout=0.3)
    try:
        with FaultServer(tool_then_answer) as srv:
            out = env.evaluate_sync(client_for(srv), "m", max_concurrent=1)
    finally:
        release.set()
    errors = [st["error"] and st["error"]["type"] for st in out.state]
    assert errors.count("ToolTimeoutError") == 1 and errors.count(None) == 3
    assert all(daemon and name != threading.main_thread().name for name, daemon in where)


@pytest.mark.parametrize("width", ["1", "2"])
@pytest.mark.parametrize("entry", ["evaluate_sync", "await evaluate"])
def test_a_sync_reward_that_runs_an_evaluation_of_its_own_does_not_wait_for_itself(
    entry: str, width: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lane runs one call at a time; a sync reward that runs a nested evaluation (whose own sync
    rewards need the lane) already holds it, so they run in its thread instead of queueing
    behind it forever. With a wider lane the nested run leaves the outer one's lane whole."""
    from verifiers.engine.threads import reset_sync_pool, sync_pool

    monkeypatch.setenv("VF_SYNC_WORKERS", width)
    reset_sync_pool()

    def inner(completion, **kw) -> float:
        return 1.0

    with FaultServer(chat_body("ok")) as srv:

        def outer(completion, **kw) -> float:
            nested = vf.SingleTurnEnv(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[inner]))
            out = nested.evaluate_sync(client_for(srv), "m")
            return sum(st["reward"] for st in out.state) / 2

        env = vf.SingleTurnEnv(dataset=ROWS[:2], rubric=vf.Rubric(funcs=[outer]), timeout_seconds=GUARD)
        try:
            if entry == "evaluate_sync":
                out = env.evaluate_sync(client_for(srv), "m")
            else:
                out = asyncio.run(env.evaluate(client_for(srv), "m"))
            lane = sync_pool()
            assert lane.busy_threads == 0 and len(lane._threads) <= lane.max_workers
        finally:
            monkeypatch.delenv("VF_SYNC_WORKERS")
            reset_sync_pool()
    assert [st["error"] for st in out.state] == [None, None]
    assert [st["reward"] for st in out.state] == [1.0, 1.0]


def test_a_rollout_whose_own_sync_tool_holds_the_lane_still_times_out() -> None:
    """Two sync tools of one turn, no ``tool_timeout``: the first never returns, the second waits
    behind it in the lane. The wait does not stop the rollout's clock (its own call holds the
    lane), so the rollout timeout ends it."""
    release = threading.Event()

    def slow(x: int) -> int:
        """Blocks.

        Args:
            x: x.
        """
        release.wait(GUARD)
        return x

    def quick(x: int) -> int:
        """Returns.

        Args:
            x: x.
        """
        return x

    def handler(request) -> Any:
        if request.body["messages"][-1]["role"] == "tool":
            return chat_body("ok")
        calls = [{"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": '{"x": 1}'}}
                 for i, name in enumerate(("slow", "quick"))]  # fmt: skip
        return chat_body(None, tool_calls=calls, finish_reason="tool_calls")

    env = vf.ToolEnv(tools=[slow, quick], dataset=ROWS[:1], rubric=vf.Rubric(funcs=[exact]), timeout_seconds=0.5)
    try:
        with FaultServer(handler) as srv:
            out = env.evaluate_sync(client_for(srv), "m")
    finally:
        release.set()
    # with the clock paused the rollout would end well once ``slow`` gave up waiting: no error
    assert out.state[0]["error"]["type"] == "TimeoutError"
