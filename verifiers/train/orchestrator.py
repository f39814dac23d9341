"""The asynchronous orchestrator: rollout groups in flight, batches out, weight updates in.

It keeps up to ``max_in_flight`` rollout groups (one example x ``group_size`` rollouts) running
against the inference servers (round-robin over the healthy ones) and refills as they finish. Each
group records the policy version it was started under. Admission is tied to the trainer: at most
``async_steps`` batches may be generated ahead of the weights the trainer has published, so
``async_steps=0`` is the synchronous loop (generate, then train, then update) and ``async_steps=1``
overlaps the generation of batch n+1 with the training on batch n.

Off-policy bound: a group whose policy version is more than ``max_off_policy`` versions behind the
current one is dropped when a batch is assembled and its example is rescheduled; groups still in
flight when they fall out of the bound are cancelled and rescheduled at the weight update.

Failed rollouts are never a training signal. A rollout that recorded an error (``state["error"]``:
a tool, the sandbox, the model server, the rubric ...) is excluded from the loss: with
``on_rollout_error = "drop_rollout"`` (the default) the group's advantages are computed over the
rollouts that did not fail and a group left with fewer than 2 of them is dropped; with
``"drop_group"`` any failure drops the whole group. The default keeps the healthy rollouts' signal:
they are samples of the same prompt under the same policy, and their mean is a baseline of the same
kind as the full group's (it is what a group of that size would have given). ``drop_group`` is for
environments whose failures depend on the prompt (a broken sandbox image for some tasks), where the
survivors of a group would be a biased sample. Every batch counts failures by source
(``rollouts/errors/<source>``) and the share of rollouts dropped for them, and when more than
``max_error_rate`` of the last ``error_window`` rollouts failed the run stops with
:class:`RolloutsFailingError` naming the commonest error and a sample.

Servers: a group whose model requests failed with a connection error or a timeout makes the
orchestrator ask the server's ``/health``; a server that does not answer (or fails the periodic
health check) gets no new work, its in-flight groups are cancelled and rescheduled on the others, a
server the loop launched is restarted, and any server that comes back is given the current weights
before it takes work again. When no server is left, :meth:`Orchestrator.next_batch` raises
:class:`NoServerError`; it never waits longer than ``batch_timeout_s`` for a batch.

State for exact resume (data position per environment, the mixer, the reschedule queue, versions,
RNG) comes out of :meth:`Orchestrator.state_dict`; groups buffered or in flight at that moment are
put back in the reschedule queue, so a resumed run sees the same examples next.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from verifiers.train.advantages import group_advantages, has_signal
from verifiers.train.samples import Sample, assign_advantage, rollout_to_samples, sample_metrics
from verifiers.utils.async_utils import wait_for


class OrchestratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    batch_groups: int = 16          # groups per trainer step
    group_size: int = 8             # rollouts per example
    max_in_flight: int = 32         # groups generating at once (across servers)
    async_steps: int = 1            # batches generated ahead of the published weights (0 = synchronous)
    max_off_policy: int = 2         # drop groups older than this many policy versions
    normalize_std: bool = False
    drop_no_signal: bool = True     # online difficulty filtering
    max_seq_len: int = 256
    health_interval_s: float = 5.0
    seed: int = 0
    # What a failed rollout (state["error"]) does: drop it alone (advantages over the rest of its
    # group; fewer than 2 left drops the group) or drop its whole group. See the module docstring.
    on_rollout_error: Literal["drop_rollout", "drop_group"] = "drop_rollout"
    max_error_rate: float = Field(0.5, ge=0.0, le=1.0)  # stop the run above this share of failed rollouts ...
    error_window: int = Field(128, ge=1)                # ... over this many most recent rollouts
    batch_timeout_s: float = Field(1800.0, gt=0)        # next_batch never waits longer for one batch
    server_grace_s: float = Field(60.0, ge=0)           # how long every server may be down before the run stops
    max_infra_retries: int = Field(3, ge=0)             # reschedules of one example after server failures


class RolloutsFailingError(RuntimeError):
    """Too many rollouts ended in an error: training on what is left would train on garbage."""


class NoServerError(RuntimeError):
    """No inference server is left to generate rollouts."""


class ServerLostError(RuntimeError):
    """A group's requests failed because its server went away; the group is rescheduled."""

    def __init__(self, server_i: int, detail: str) -> None:
        super().__init__(f"server {server_i}: {detail}")
        self.server_i = server_i


class EnvInfraError(RuntimeError):
    """An env server lost the group's episodes (its worker died, it refused the run, it stopped
    answering): the group is rescheduled, never scored (``groups/rescheduled_infra``)."""


def state_field(state: Any, key: str) -> Any:
    """A field of a rollout state (a dict-like State or an object with attributes)."""
    return state.get(key) if hasattr(state, "get") else getattr(state, key, None)


def rollout_error(state: Any) -> dict[str, Any] | None:
    """The error a rollout recorded, as ``{"type", "message", "source"}``, or None."""
    err = state_field(state, "error")
    if not err:
        return None
    if isinstance(err, Mapping):
        return {"type": str(err.get("type") or "Error"), "message": str(err.get("message") or ""),
                "source": str(err.get("source") or "unknown")}
    if isinstance(err, BaseException):
        return {"type": type(err).__name__, "message": str(err), "source": "unknown"}
    return {"type": "Error", "message": str(err), "source": "unknown"}


def error_source_kind(err: Mapping[str, Any]) -> str:
    """The metric name of an error's source: ``tool:search`` -> ``tool`` (bounded metric names)."""
    return str(err.get("source") or "unknown").split(":", 1)[0] or "unknown"


def _infra_error(err: Mapping[str, Any] | None) -> bool:
    """A model request that got no answer (connection refused/reset, timeout): the server's fault."""
    if not err or error_source_kind(err) != "model":
        return False
    return err.get("type") == "ModelTimeoutError" or "connection error" in str(err.get("message", "")).lower()


def _unreachable(exc: BaseException) -> bool:
    """A failure to reach a server at all (refused, reset, timed out), as opposed to an answer."""
    import httpx

    return isinstance(exc, (httpx.TransportError, OSError, TimeoutError, asyncio.TimeoutError))


def _reward(state: Any) -> float:
    return float(state_field(state, "reward") or 0.0)


@dataclass
class EnvEntry:
    """One environment of the mix: its name, the loaded environment, its ratio and its rows."""

    name: str
    env: Any
    ratio: float
    rows: list[dict[str, Any]]


@dataclass
class GroupResult:
    env: str
    example_index: int
    states: list[Any]
    policy_version: int
    server: int
    started: float = 0.0
    finished: float = 0.0


@dataclass
class Batch:
    samples: list[Sample]
    groups: list[GroupResult]
    metrics: dict[str, float] = field(default_factory=dict)
    # Every rollout that arrived for this batch (trained, failed or filtered): (env, example, version, state).
    rollouts: list[tuple[str, int, int, Any]] = field(default_factory=list)


RolloutGroupFn = Callable[[EnvEntry, dict[str, Any], int, Any, str, dict[str, Any]], Awaitable[list[Any]]]


async def env_rollout_group(entry: EnvEntry, row: dict[str, Any], n: int, client: Any, model: str,
                            sampling_args: dict[str, Any]) -> list[Any]:
    """Run ``n`` rollouts of one dataset row with the environment's own engine and score them together."""
    inputs = [dict(row) for _ in range(n)]
    for i, r in enumerate(inputs):
        r["rollout_index"] = i
    return list(await entry.env.run_group(inputs, client, model, sampling_args))


class EnvMixer:
    """Deterministic weighted round-robin over environments (smooth WRR: exact ratios over any window)."""

    def __init__(self, ratios: Sequence[float]) -> None:
        if not ratios or any(r < 0 for r in ratios) or sum(ratios) <= 0:
            raise ValueError("environment ratios must be non-negative and not all zero")
        self.ratios = [float(r) for r in ratios]
        self.credit = [0.0] * len(ratios)

    def next(self) -> int:
        total = sum(self.ratios)
        for i, r in enumerate(self.ratios):
            self.credit[i] += r
        i = max(range(len(self.credit)), key=lambda j: (self.credit[j], -j))
        self.credit[i] -= total
        return i


class Orchestrator:
    #: next_batch re-checks errors and its own timeout this often while no group finishes (it is woken
    #: at once by every finished group; this is only a safety net).
    poll_s: float = 1.0

    def __init__(self, envs: Sequence[EnvEntry], servers: Sequence[Any], cfg: OrchestratorConfig,
                 sampling_args: dict[str, Any], *, rollout_fn: RolloutGroupFn = env_rollout_group,
                 health_check: bool = True) -> None:
        if not envs:
            raise ValueError("at least one environment is needed")
        if not servers:
            raise ValueError("at least one inference server is needed")
        self.envs = list(envs)
        self.servers = list(servers)
        self.cfg = cfg
        self.sampling_args = dict(sampling_args)
        self.rollout_fn = rollout_fn
        self.health_check = health_check
        self.mixer = EnvMixer([e.ratio for e in self.envs])
        self.rng = random.Random(cfg.seed)
        self.order: list[list[int]] = [self._shuffled(i, 0) for i in range(len(self.envs))]
        self.cursor = [0] * len(self.envs)
        self.epoch = [0] * len(self.envs)
        self.retry: deque[tuple[int, int]] = deque()  # (env index, example index) to reschedule first
        self.version = 0              # policy version currently served by the inference servers
        self.weights_path: str | None = None  # where that version's weights are (for servers that come back)
        self.batches_out = 0          # batches handed to the trainer
        self._rr = 0
        # task -> (env, example, version, server)
        self._inflight: dict[asyncio.Task, tuple[int, int, int, int]] = {}
        self._buffer: deque[GroupResult] = deque()
        self._taken = 0  # groups accepted into the batch under construction
        # Two events, one per waiter (the admission loop, next_batch): each clears only its own. One
        # shared event lost wake-ups: the admission loop could clear it before next_batch's waiter
        # had started, leaving next_batch to sleep until its 1 s timeout (seen as 1.0 s stalls).
        self._wake_admit = asyncio.Event()
        self._wake_batch = asyncio.Event()
        self._admit_task: asyncio.Task | None = None
        self._health_task: asyncio.Task | None = None
        self.counters = {"dropped_off_policy": 0, "cancelled": 0, "filtered_no_signal": 0, "errors": 0,
                         "rescheduled_server": 0, "rescheduled_infra": 0, "server_restarts": 0, "dropped_error_groups": 0}
        self._last_error: BaseException | None = None
        self._consecutive_errors = 0
        # Failed-rollout bookkeeping: the last `error_window` rollouts (True = failed) and their errors.
        self._window: deque[tuple[bool, tuple[str, str, str] | None]] = deque(maxlen=cfg.error_window)
        self._samples_of_error: dict[tuple[str, str, str], str] = {}
        self._fatal: BaseException | None = None
        # Servers: down (no new work) since when, and those that must get the current weights first.
        self._down_since: dict[int, float] = {}
        self._needs_sync: set[int] = set()
        self._restarting: dict[int, asyncio.Task] = {}
        self._infra_retries: Counter[tuple[int, int]] = Counter()
        self._bg: set[asyncio.Task] = set()

    @property
    def generating(self) -> bool:
        """Whether rollout groups are running now (read from the trainer's thread, too)."""
        return bool(self._inflight)

    # -- data position -----------------------------------------------------------------------------
    def _shuffled(self, env_i: int, epoch: int) -> list[int]:
        idx = list(range(len(self.envs[env_i].rows)))
        random.Random(f"{self.cfg.seed}:{env_i}:{epoch}").shuffle(idx)
        return idx

    def _next_example(self) -> tuple[int, int]:
        if self.retry:
            return self.retry.popleft()
        e = self.mixer.next()
        if self.cursor[e] >= len(self.order[e]):
            self.epoch[e] += 1
            self.order[e] = self._shuffled(e, self.epoch[e])
            self.cursor[e] = 0
        ex = self.order[e][self.cursor[e]]
        self.cursor[e] += 1
        return e, ex

    # -- admission and generation ------------------------------------------------------------------
    def _budget(self) -> int:
        """How many groups may be buffered + in flight now (see the module docstring)."""
        lag = self.batches_out - self.version
        ahead = 1 + self.cfg.async_steps - lag
        # Groups already taken into the batch being assembled count too: otherwise the synchronous
        # loop would start the next batch's groups under the old policy while finishing this one.
        return max(0, min(ahead * self.cfg.batch_groups - self._taken, self.cfg.max_in_flight + len(self._buffer)))

    def _usable(self, i: int) -> bool:
        return getattr(self.servers[i], "healthy", True) and i not in self._down_since \
            and i not in self._needs_sync

    def _pick_server(self) -> int | None:
        n = len(self.servers)
        for k in range(n):
            i = (self._rr + k) % n
            if self._usable(i):
                self._rr = i + 1
                return i
        return None

    async def _run_group(self, env_i: int, ex: int, version: int, server_i: int) -> GroupResult:
        entry = self.envs[env_i]
        server = self.servers[server_i]
        started = time.perf_counter()
        try:
            states = await self.rollout_fn(entry, entry.rows[ex], self.cfg.group_size, server.client,
                                           server.model, self.sampling_args)
        except EnvInfraError:
            if self._infra_retries[(env_i, ex)] >= self.cfg.max_infra_retries:
                raise RuntimeError(f"{entry.name} example {ex}: env servers lost it "
                                   f"{self.cfg.max_infra_retries + 1} times (orchestrator.max_infra_retries)")
            self._infra_retries[(env_i, ex)] += 1
            raise
        infra = [e for e in map(rollout_error, states) if _infra_error(e)]
        if infra and self._infra_retries[(env_i, ex)] < self.cfg.max_infra_retries:
            # Requests got no answer: ask the server. Down -> reschedule elsewhere; up again -> it may
            # have restarted with its initial weights, so it is synced before it takes more work.
            self._infra_retries[(env_i, ex)] += 1
            up = await server.check_health() if hasattr(server, "check_health") else True
            if not up:
                self._mark_down(server_i)
            else:
                self._needs_sync.add(server_i)
                self._spawn(self._sync_server(server_i))
            raise ServerLostError(server_i, f"{infra[0]['type']}: {infra[0]['message']}")
        return GroupResult(entry.name, ex, states, version, server_i, started, time.perf_counter())

    def _admit(self) -> None:
        if self._fatal is not None:
            return
        while len(self._inflight) < self.cfg.max_in_flight and \
                len(self._inflight) + len(self._buffer) < self._budget():
            server_i = self._pick_server()
            if server_i is None:
                return
            env_i, ex = self._next_example()
            task = asyncio.get_running_loop().create_task(self._run_group(env_i, ex, self.version, server_i))
            self._inflight[task] = (env_i, ex, self.version, server_i)
            task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task) -> None:
        env_i, ex, _version, _server = self._inflight.pop(task, (None, None, None, None))
        if task.cancelled():
            pass
        elif isinstance(task.exception(), EnvInfraError):
            self.counters["rescheduled_infra"] += 1
            self._last_error = task.exception()
            if env_i is not None:
                self.retry.appendleft((env_i, ex))
        elif isinstance(task.exception(), ServerLostError):
            self.counters["rescheduled_server"] += 1
            if env_i is not None:
                self.retry.appendleft((env_i, ex))
        elif task.exception() is not None:
            exc = task.exception()
            self.counters["errors"] += 1
            self._consecutive_errors += 1
            self._last_error = exc
            rec = {"type": type(exc).__name__, "message": str(exc) or repr(exc), "source": "orchestrator"}
            for _ in range(self.cfg.group_size):
                self._record_rollout(rec, env_i, ex)
            if env_i is not None:
                self.retry.append((env_i, ex))
        else:
            self._consecutive_errors = 0
            g = task.result()
            env_i = self.envs_index(g.env)
            for s in g.states:
                self._record_rollout(rollout_error(s), env_i, g.example_index)
            self._buffer.append(g)
        self._check_error_rate()
        self._wake()

    # -- failed rollouts ---------------------------------------------------------------------------
    def _record_rollout(self, err: Mapping[str, Any] | None, env_i: int | None, ex: int | None) -> None:
        if err is None:
            self._window.append((False, None))
            return
        key = (error_source_kind(err), str(err.get("type")), str(err.get("source")))
        self._window.append((True, key))
        if key not in self._samples_of_error:
            where = f"{self.envs[env_i].name} example {ex}" if env_i is not None else "unknown example"
            self._samples_of_error[key] = f"{str(err.get('message'))[:300]!r} ({where})"

    def _check_error_rate(self) -> None:
        if self._fatal is not None or len(self._window) < self.cfg.error_window:
            return
        failed = [k for bad, k in self._window if bad]
        share = len(failed) / len(self._window)
        if share <= self.cfg.max_error_rate or not failed:
            return
        (src, typ, full_src), count = Counter(failed).most_common(1)[0]
        self._fatal = RolloutsFailingError(
            f"stopping: {len(failed)} of the last {len(self._window)} rollouts ended in an error "
            f"({share:.0%}, above orchestrator.max_error_rate = {self.cfg.max_error_rate:.0%}); the "
            f"commonest is {typ} from {full_src} ({count} of them), e.g. "
            f"{self._samples_of_error.get((src, typ, full_src), '')}")

    # -- servers -----------------------------------------------------------------------------------
    def _spawn(self, coro: Awaitable[Any]) -> None:
        t = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._bg.add(t)
        t.add_done_callback(self._bg.discard)

    def _mark_down(self, i: int) -> None:
        """Server ``i`` stopped answering: no new work; its in-flight groups go to the others."""
        if i in self._down_since:
            return
        self._down_since[i] = time.monotonic()
        self._needs_sync.add(i)
        me = asyncio.current_task()  # a group that found its server down reschedules itself
        for task, (env_i, ex, _v, srv) in list(self._inflight.items()):
            if srv == i and task is not me and not task.done() and task.cancel():
                self.counters["rescheduled_server"] += 1
                self.retry.appendleft((env_i, ex))
        server = self.servers[i]
        if i not in self._restarting and callable(getattr(server, "restart", None)) \
                and getattr(server, "can_restart", False):
            self._restarting[i] = asyncio.get_running_loop().create_task(self._restart(i))
        self._wake()

    async def _restart(self, i: int) -> None:
        try:
            await self.servers[i].restart()
            self.counters["server_restarts"] += 1
            await self._sync_server(i)
        except Exception as exc:  # the restart failed: the server stays down (and may be tried again)
            self._last_error = exc
        finally:
            self._restarting.pop(i, None)
            self._wake()

    async def _sync_server(self, i: int) -> None:
        """Give server ``i`` the current weights, then let it take work again."""
        server = self.servers[i]
        try:
            if hasattr(server, "check_health") and not await server.check_health():
                self._mark_down(i)
                return
            if self.weights_path is not None and hasattr(server, "reload_weights"):
                await server.reload_weights(self.weights_path, self.version)
        except Exception:
            self._mark_down(i)
            return
        self._down_since.pop(i, None)
        self._needs_sync.discard(i)
        self._wake()

    async def check_servers(self) -> None:
        """One health round: servers that fail go down; servers that answer again are synced first."""
        checks = [(i, s) for i, s in enumerate(self.servers) if hasattr(s, "check_health")]
        results = await asyncio.gather(*(s.check_health() for _, s in checks), return_exceptions=True)
        for (i, _s), ok in zip(checks, results, strict=True):
            if ok is not True:
                self._mark_down(i)
            elif i in self._needs_sync and i not in self._restarting:
                await self._sync_server(i)
        self._wake()

    def _no_server_error(self) -> NoServerError | None:
        """All servers down for longer than ``server_grace_s`` (and none restarting): give up."""
        if self._restarting or any(self._usable(i) for i in range(len(self.servers))):
            return None
        if not self._down_since:
            return None
        since = min(self._down_since.values())
        if time.monotonic() - since < self.cfg.server_grace_s:
            return None
        names = ", ".join(str(getattr(s, "base_url", i)) for i, s in enumerate(self.servers))
        extra = f"; last error: {self._last_error!r}" if self._last_error is not None else ""
        return NoServerError(
            f"no inference server left: {names} stopped answering /health "
            f"({time.monotonic() - since:.0f} s ago, orchestrator.server_grace_s = "
            f"{self.cfg.server_grace_s:g}){extra}")

    def _wake(self) -> None:
        """Something changed (a group finished, a batch was taken, new weights, health): tell both."""
        self._wake_admit.set()
        self._wake_batch.set()

    async def _admit_loop(self) -> None:
        while True:
            self._wake_admit.clear()
            self._admit()
            await self._wake_admit.wait()

    async def _health_loop(self) -> None:
        while True:
            await asyncio.sleep(self.cfg.health_interval_s)
            with contextlib.suppress(Exception):
                await self.check_servers()

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._admit_task is None:
            self._admit_task = loop.create_task(self._admit_loop())
        if self.health_check and self._health_task is None:
            self._health_task = loop.create_task(self._health_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._admit_task, self._health_task) if t is not None] + list(self._inflight) \
            + list(self._restarting.values()) + list(self._bg)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._admit_task = self._health_task = None

    # -- batches -----------------------------------------------------------------------------------
    def _to_samples(self, g: GroupResult, stats: Counter[str]) -> list[Sample] | None:
        """The group's training samples, or None when it is dropped (failures, no signal)."""
        errs = [rollout_error(s) for s in g.states]
        stats["rollouts"] += len(g.states)
        for e in errs:
            if e is not None:
                stats[f"errors/{error_source_kind(e)}"] += 1
        ok = [s for s, e in zip(g.states, errs, strict=True) if e is None]
        n_failed = len(g.states) - len(ok)
        if n_failed and (self.cfg.on_rollout_error == "drop_group" or len(ok) < 2):
            stats["dropped"] += len(g.states)
            self.counters["dropped_error_groups"] += 1
            return None
        stats["dropped"] += n_failed
        rewards = [_reward(s) for s in ok]
        if self.cfg.drop_no_signal and not has_signal(rewards):
            self.counters["filtered_no_signal"] += 1
            return None
        adv = group_advantages(rewards, normalize_std=self.cfg.normalize_std)
        out: list[Sample] = []
        gid = self.batches_out * 100000 + g.example_index
        for state, a in zip(ok, adv, strict=True):
            ss = rollout_to_samples(state, max_seq_len=self.cfg.max_seq_len, policy_version=g.policy_version,
                                    env=g.env)
            assign_advantage(ss, a)
            for s in ss:
                s.group_id = gid
            out.extend(ss)
        return out

    async def next_batch(self, timeout: float | None = None) -> Batch:
        """Wait for ``batch_groups`` usable groups (off-policy bound, failure and signal filters applied).

        Raises :class:`RolloutsFailingError` when too many rollouts fail, :class:`NoServerError` when
        no server is left, and ``TimeoutError`` after ``timeout`` (default ``batch_timeout_s``).
        """
        self.start()
        limit = self.cfg.batch_timeout_s if timeout is None else timeout
        t0 = time.perf_counter()
        groups: list[GroupResult] = []
        samples: list[Sample] = []
        all_rewards: list[float] = []
        stats: Counter[str] = Counter()
        seen: list[tuple[str, int, int, Any]] = []
        while len(groups) < self.cfg.batch_groups:
            while not self._buffer:
                if self._fatal is not None:
                    raise self._fatal
                if self._consecutive_errors >= 3 * max(1, len(self.servers)) and self._last_error is not None:
                    raise RuntimeError(f"rollouts keep failing: {self._last_error!r}") from self._last_error
                no_server = self._no_server_error()
                if no_server is not None:
                    raise no_server
                self._wake_batch.clear()
                self._admit()
                if time.perf_counter() - t0 > limit:
                    raise TimeoutError(
                        f"no batch within {limit:g} s: {len(groups)} of {self.cfg.batch_groups} groups "
                        f"ready, {len(self._inflight)} in flight (orchestrator.batch_timeout_s)")
                with contextlib.suppress(TimeoutError):
                    await wait_for(self._wake_batch.wait(), timeout=self.poll_s)
            if self._fatal is not None:
                raise self._fatal
            g = self._buffer.popleft()
            self._wake()
            if self.version - g.policy_version > self.cfg.max_off_policy:
                self.counters["dropped_off_policy"] += 1
                self.retry.append((self.envs_index(g.env), g.example_index))
                continue
            all_rewards.extend(_reward(s) for s in g.states if rollout_error(s) is None)
            seen.extend((g.env, g.example_index, g.policy_version, s) for s in g.states)
            ss = self._to_samples(g, stats)
            if ss is None:
                continue
            groups.append(g)
            samples.extend(ss)
            self._taken = len(groups)
        self._taken = 0
        self.batches_out += 1
        self._wake()
        m = self._batch_metrics(groups, samples, all_rewards, time.perf_counter() - t0)
        n = max(1, stats["rollouts"])
        m["rollouts/errors"] = float(sum(v for k, v in stats.items() if k.startswith("errors/")))
        for k, v in stats.items():
            if k.startswith("errors/"):
                m[f"rollouts/{k}"] = float(v)
        m["rollouts/error_frac"] = m["rollouts/errors"] / n
        m["rollouts/dropped_frac"] = stats["dropped"] / n
        return Batch(samples, groups, m, seen)

    def usable_server(self) -> Any:
        """A server that is up and synced now (for evaluations), or the first one."""
        return next((s for i, s in enumerate(self.servers) if self._usable(i)), self.servers[0])

    def envs_index(self, name: str) -> int:
        return next(i for i, e in enumerate(self.envs) if e.name == name)

    def _batch_metrics(self, groups: list[GroupResult], samples: list[Sample], all_rewards: list[float],
                       wait_s: float) -> dict[str, float]:
        rewards = [_reward(s) for g in groups for s in g.states if rollout_error(s) is None]
        offp = [self.version - g.policy_version for g in groups]
        n = max(1, len(rewards))
        mean = sum(rewards) / n
        m = {
            # reward/mean counts every rollout that arrived in time and did not fail (filtered groups
            # included), so it measures the policy, not the filter; reward/trained_mean is over the
            # trained groups only. Failed rollouts are counted under rollouts/errors/*.
            "reward/mean": sum(all_rewards) / max(1, len(all_rewards)),
            "reward/trained_mean": mean,
            "reward/std": (sum((r - mean) ** 2 for r in rewards) / n) ** 0.5,
            "off_policy/max": float(max(offp) if offp else 0),
            "off_policy/mean": sum(offp) / max(1, len(offp)),
            "off_policy/dropped": float(self.counters["dropped_off_policy"]),
            "off_policy/cancelled": float(self.counters["cancelled"]),
            "groups/filtered_no_signal": float(self.counters["filtered_no_signal"]),
            "groups/errors": float(self.counters["errors"]),
            "groups/dropped_errors": float(self.counters["dropped_error_groups"]),
            "groups/rescheduled_server": float(self.counters["rescheduled_server"]),
            "groups/rescheduled_infra": float(self.counters["rescheduled_infra"]),
            "servers/restarts": float(self.counters["server_restarts"]),
            "servers/down": float(len(self._down_since)),
            "samples/count": float(len(samples)),
            "samples/truncated_frac": sum(s.truncated for s in samples) / max(1, len(samples)),
            **sample_metrics(samples),
            "tokens/sampled": float(sum(s.num_loss_tokens for s in samples)),
            "tokens/total": float(sum(len(s) for s in samples)),
            "time/wait_batch_s": wait_s,
        }
        for e in self.envs:
            er = [_reward(s) for g in groups if g.env == e.name for s in g.states if rollout_error(s) is None]
            if len(self.envs) > 1 and er:
                m[f"reward/{e.name}"] = sum(er) / len(er)
        return m

    # -- weight updates ----------------------------------------------------------------------------
    async def update_weights(self, path: str | None, version: int) -> float:
        """Publish policy ``version`` to every server (in place; in-flight requests keep running), then
        cancel and reschedule in-flight groups that fell out of the off-policy bound."""
        t0 = time.perf_counter()
        if path is not None:
            self.weights_path = str(path)
            live = [i for i in range(len(self.servers)) if i not in self._down_since]
            results = await asyncio.gather(*(self.servers[i].reload_weights(path, version) for i in live),
                                           return_exceptions=True)
            for i, r in zip(live, results, strict=True):
                if not isinstance(r, BaseException):
                    continue
                if not _unreachable(r):
                    raise r  # a server that answers but refuses the weights: a set-up error, say it now
                # Gone: it must not serve the old weights; it gets the current ones if it comes back.
                self._last_error = r
                self._mark_down(i)
        self.set_version(version)
        return time.perf_counter() - t0

    def set_version(self, version: int) -> None:
        """The servers now serve ``version``: cancel and reschedule in-flight groups out of the bound.

        A task that is already done cannot be cancelled (its result is on its way to the buffer,
        where the bound is applied again); counting it, or rescheduling its example, would run the
        example twice.
        """
        self.version = version
        for task, (env_i, ex, v, _srv) in list(self._inflight.items()):
            if self.version - v > self.cfg.max_off_policy and not task.done() and task.cancel():
                self.counters["cancelled"] += 1
                self.retry.append((env_i, ex))
        self._wake()

    # -- resume ------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue with the same data stream; pending work is rescheduled."""
        pending = [(e, x) for (e, x, _v, _s) in self._inflight.values()]
        pending += [(self.envs_index(g.env), g.example_index) for g in self._buffer]
        return {
            "version": self.version, "batches_out": self.batches_out, "cursor": list(self.cursor),
            "epoch": list(self.epoch), "mixer_credit": list(self.mixer.credit),
            "retry": [list(p) for p in (*pending, *self.retry)], "rng": self.rng.getstate(),
            "counters": dict(self.counters), "env_names": [e.name for e in self.envs],
        }

    def load_state_dict(self, sd: dict[str, Any]) -> None:
        if sd.get("env_names") and sd["env_names"] != [e.name for e in self.envs]:
            raise ValueError(f"checkpoint was made with environments {sd['env_names']}")
        self.version = int(sd["version"])
        self.batches_out = int(sd["batches_out"])
        self.cursor = list(sd["cursor"])
        self.epoch = list(sd["epoch"])
        self.order = [self._shuffled(i, ep) for i, ep in enumerate(self.epoch)]
        self.mixer.credit = list(sd["mixer_credit"])
        self.retry = deque(tuple(p) for p in sd["retry"])
        rng = sd["rng"]
        self.rng.setstate((rng[0], tuple(rng[1]), rng[2]))
        self.counters.update(sd.get("counters", {}))
