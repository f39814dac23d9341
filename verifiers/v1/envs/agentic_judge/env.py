"""Agentic judging: a ``solver`` plays the task, then a ``judge`` agent checks the work by running
code and writes a verdict file; the verdict becomes the solver's ``judge`` reward.

Two envs share the protocol and differ only in where the judge works:

* ``agentic-judge``: a fresh box from the solver's runtime config, holding only the task's
  declared artifacts (collected from the solver's box after its finalize, restored at the same
  paths);
* ``shared-agentic-judge``: the solver's own box, every change the solver made still there.

Before the judge starts, its working folder gets ``vf-judge/trace.json`` (the solver's trace
record; its hidden reasoning left out unless ``[env.task] include_hidden_reasoning``) and any
earlier ``vf-judge`` is removed. The judge's task prompt states the grading policy
(``[env.task] prompt``), hints, the criteria (``[env.task] rubric``, the ``rubric`` judge's file
format; default: one ``solved`` criterion) and the verdict contract: write
``{"verdicts": [{"name", "reason", "verdict"}, ...]}`` to ``vf-judge/verdict.json``. The
verdict is read off the judge's box when its run ends; a missing or malformed one fails the
judge's trace, and an incomplete one fails the episode: never a silent 0.

On the solver's trace: metrics ``judge/<criterion>``, the reward ``judge`` (weighted mean of the
criteria, weight ``[env.score] judge_weight``), and the task's own rewards scaled by
``[env.score] task_weight`` (0 by default: judge only). The judge's trace is not trainable.

Differences from the original: the judge's files live under ``vf-judge/`` in its working folder
(the original: ``/tmp`` inside a container), and the subprocess runtime is allowed (the original
requires a container, which this version does not run): there the judge's commands run on this
machine, in the rollout's temporary folder, like the ``bash`` harness's always do.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import FiniteFloat, ValidationError

from verifiers.v1.agents import AgentConfig, Agents
from verifiers.v1.configs import BaseConfig
from verifiers.v1.env import Env
from verifiers.v1.episode import Episode
from verifiers.v1.harness import HarnessConfig
from verifiers.v1.judge import fill
from verifiers.v1.judges.rubric import Criterion, RubricVerdicts, load_criteria, score_verdicts, weighted
from verifiers.v1.loading import EnvConfig
from verifiers.v1.task import Task, TaskData
from verifiers.v1.trace import Trace

JUDGE_DIR = "vf-judge"
VERDICT_FILE = f"{JUDGE_DIR}/verdict.json"
TRACE_FILE = f"{JUDGE_DIR}/trace.json"
MAX_VERDICT_BYTES = 1024 * 1024

POLICY = """You are checking another agent's attempt at a task. Do not trust its account of what it did: \
reconstruct its work from the record it left and from the workspace, and check every outcome you can \
by actually running things.

## The task the agent was given

{prompt}"""

TASK_SECTION = """## The task the agent was given

{prompt}"""

HINTS = """## Hints

{hint}"""

SHARED_NOTE = """## Your workspace

You are in the agent's own working folder: its changes, and anything its task's checks left behind, \
are here. The agent's trace record (JSON: its messages, tool calls and `info`) is at `{trace}`, written \
by the harness, not by the agent. It can be large: inspect it piecewise (its keys, then the fields you \
need) rather than printing it whole. Scores or reference material it may carry are context, not your \
standard: your verdict is what you verified yourself."""

ISOLATED_NOTE = """## Your workspace

This is a fresh working folder. Only the task's declared artifacts from the agent's run were restored \
here, at their original paths ({artifacts}); nothing else the agent changed is present. The agent's \
trace record (JSON: its messages, tool calls and `info`) is at `{trace}`, written by the harness, not by \
the agent. It can be large: inspect it piecewise rather than printing it whole. Scores or reference \
material it may carry are context, not your standard: your verdict is what you verified yourself."""

SOLVED = Criterion(name="solved", text="The task is fully solved, and you confirmed it by running things.")


def verdict_section(criteria: list[Criterion]) -> str:
    listing = "\n".join(c.line() for c in criteria)
    return (
        "## Your verdict\n\nGrade the attempt on these criteria (allowed answers in parentheses, worst first):\n\n"
        f"{listing}\n\nWhen you have finished checking, write your verdict as JSON to `{VERDICT_FILE}` "
        "(relative to your working folder):\n\n"
        '    {"verdicts": [{"name": "<criterion name>", "reason": "<one sentence on what you checked>", '
        '"verdict": "<one allowed answer>"}]}\n\n'
        "One entry per criterion, under its exact name; write the reason before choosing the verdict."
    )


class TextFile(BaseConfig):
    """Text read from a file (for config formats without a path type): ``{ path = "policy.md" }``."""

    path: Path


TextSource = str | Path | TextFile


def read_text(value: TextSource) -> str:
    if isinstance(value, str):
        return value
    return (value if isinstance(value, Path) else value.path).read_text(encoding="utf-8")


class JudgeTaskConfig(BaseConfig):
    """``[env.task]``: the judge's task."""

    prompt: TextSource | None = None
    """The grading policy (text, or ``{ path = ... }``); ``{prompt}`` is the solver's task prompt
    (appended after when the policy does not place it). The verdict contract and workspace note
    are always added."""
    hint: TextSource | None = None
    rubric: Path | None = None
    """Criteria file (``.toml`` / ``.json`` with ``criteria``); None: the one ``solved`` criterion."""
    include_hidden_reasoning: bool = False
    """Keep the solver's reasoning and provider state in the trace record the judge reads."""

    def build_prompt(self) -> str:
        return POLICY if self.prompt is None else read_text(self.prompt)

    def build_hint(self) -> str | None:
        return None if self.hint is None else read_text(self.hint)

    def criteria(self) -> list[Criterion]:
        return [SOLVED] if self.rubric is None else load_criteria(self.rubric)


class ScoreConfig(BaseConfig):
    """``[env.score]``: how the verdict and the task's own rewards combine on the solver's trace."""

    task_weight: FiniteFloat = 0.0
    judge_weight: FiniteFloat = 1.0


def trace_record(solution: Trace, include_hidden_reasoning: bool) -> bytes:
    record = solution.to_record()
    if not include_hidden_reasoning:
        for node in record.get("nodes", []):
            node.get("message", {}).pop("reasoning_content", None)
            node.get("message", {}).pop("provider_state", None)
    return json.dumps(record).encode()


class JudgeTask(Task):
    """The judge's task, minted from the solver's finished trace: ``setup`` writes the trace
    record (and restores artifacts, in a fresh box), ``finalize`` reads the verdict."""

    def __init__(self, data: TaskData, files: dict[str, bytes], artifacts: dict[str, bytes | None]) -> None:
        super().__init__(data)
        self.files = files
        self.artifacts = artifacts

    @classmethod
    def from_trace(cls, solution: Trace, config: JudgeTaskConfig, share_runtime: bool = True) -> JudgeTask:
        solved = solution.task.data
        template = config.build_prompt()
        body = fill(template, {"prompt": solved.prompt_text})
        if "{prompt}" not in template:
            body += "\n\n" + fill(TASK_SECTION, {"prompt": solved.prompt_text})
        artifacts: dict[str, bytes | None] = {} if share_runtime else dict(solution.state.artifacts)
        note = SHARED_NOTE if share_runtime else ISOLATED_NOTE
        sections = [body, verdict_section(config.criteria()), fill(note, {"trace": TRACE_FILE, "artifacts": ", ".join(artifacts) or "none"})]
        hint = config.build_hint()
        if hint is not None:
            sections.insert(1, fill(HINTS, {"hint": hint}))
        data = TaskData(idx=solved.idx, prompt="\n\n".join(sections), image=solved.image, workdir=solved.workdir,
                        resources=solved.resources, network_allow=solved.network_allow, network_block=solved.network_block)  # fmt: skip
        return cls(data, files={TRACE_FILE: trace_record(solution, config.include_hidden_reasoning)}, artifacts=artifacts)

    async def setup(self, trace: Trace, runtime: Any) -> None:
        from verifiers.v1.artifacts import restore

        await restore(runtime, self.artifacts)
        # the solver had this folder first: a verdict (or a link in place of vf-judge/) it left
        # must never be read as, or redirect, the judge's own
        cleared = await runtime.run(f"rm -rf -- {JUDGE_DIR} && mkdir -- {JUDGE_DIR}")
        if not cleared.ok:
            raise RuntimeError(f"could not prepare {JUDGE_DIR}/: {cleared.stderr.strip()[-300:]}")
        for path, content in self.files.items():
            await runtime.write(path, content)

    async def finalize(self, trace: Trace, runtime: Any) -> None:
        """Read the verdict while the box is up; none, or garbage, fails the judge's trace."""
        check = await runtime.run(f"test -f {VERDICT_FILE} && test ! -L {VERDICT_FILE} && test $(wc -c < {VERDICT_FILE}) -le {MAX_VERDICT_BYTES}")
        if not check.ok:
            raise ValueError(
                f"the judge wrote no verdict to {VERDICT_FILE} (or not a plain file of at most {MAX_VERDICT_BYTES} bytes); "
                'its last act must be writing {"verdicts": [{"name", "reason", "verdict"}, ...]} there'
            )
        raw = await runtime.read(VERDICT_FILE)
        try:
            trace.info["verdict"] = RubricVerdicts.model_validate_json(raw).model_dump()
        except ValidationError as exc:
            raise ValueError(f"the judge's {VERDICT_FILE} is not a verdicts object: {str(exc)[:300]}") from None


class AgenticJudgeEnvConfig(EnvConfig):
    solver: AgentConfig = AgentConfig()
    judge: AgentConfig = AgentConfig(harness=HarnessConfig(id="bash"))
    """The judge's harness must run code (default ``bash``); its runtime is the solver's."""
    task: JudgeTaskConfig = JudgeTaskConfig()
    score: ScoreConfig = ScoreConfig()


class AgenticJudgeEnv(Env[AgenticJudgeEnvConfig]):
    """The protocol; ``IsolatedAgenticJudgeEnv`` and ``SharedAgenticJudgeEnv`` place the judge."""

    def __init__(self, config: AgenticJudgeEnvConfig) -> None:
        config.judge = config.judge.model_copy(update={"runtime": config.solver.runtime})
        super().__init__(config)
        judge = self._harnesses["judge"]
        if not judge.EXECUTES_CODE:
            raise ValueError(
                f"{self.env_id or 'agentic-judge'}: the judge's harness {judge.config.id!r} cannot run code; an agentic judge "
                "checks by running things (use the bash harness), and a judge that only reads is a plugged one "
                "([[env.taskset.task.judges]])"
            )
        # a missing policy file or a broken rubric fails here, before any solver runs
        config.task.build_prompt()
        config.task.build_hint()
        config.task.criteria()

    async def setup(self, agents: Agents) -> None:
        agents.judge.trainable = False

    async def finalize(self, task: Task, episode: Episode) -> None:
        by_role = {t.agent.name: t for t in episode.traces}
        solution, judged = by_role.get("solver"), by_role.get("judge")
        if solution is None or judged is None:
            raise RuntimeError("the episode has no solver and judge traces to combine")
        if "verdict" not in judged.info:
            raise RuntimeError("the judge left no verdict (its trace says why)")
        criteria = self.config.task.criteria()
        verdicts = RubricVerdicts.model_validate(judged.info["verdict"]).verdicts
        scores = score_verdicts(verdicts, criteria, "the rubric's criteria")
        for c in criteria:
            solution.record_metric(f"judge/{c.name}", scores[c.name])
        if self.config.score.task_weight != 1.0:
            for reward in solution.rewards.values():
                if reward is not None:
                    reward.weight *= self.config.score.task_weight
        solution.record_reward("judge", weighted(scores, criteria), weight=self.config.score.judge_weight)

    def _solver_failed(self, solution: Trace) -> None:
        if not solution.ok:
            raise RuntimeError("the solver's run failed, so the judge never ran")


class SharedAgenticJudgeEnv(AgenticJudgeEnv):
    """The judge works in the solver's own box (every change the solver made is there)."""

    async def run(self, task: Task, agents: Agents) -> None:
        import time

        async with agents.solver.provision(task) as box:
            # the task's own rewards see the box as the solver left it, before the judge works in it
            solution = await agents.solver.run(task.defer_scoring(), runtime=box)
            if solution.ok:
                before = len(solution.errors)  # an earlier try's errors (retries) do not count
                solution.timing.scoring.start = time.time()
                await task.score(solution, box)
                solution.timing.scoring.end = time.time()
                solution.ok = len(solution.errors) == before
            self._solver_failed(solution)
            await agents.judge.run(JudgeTask.from_trace(solution, self.config.task), runtime=box)


class IsolatedAgenticJudgeEnv(AgenticJudgeEnv):
    """The judge works in a fresh box holding only the task's declared artifacts."""

    async def run(self, task: Task, agents: Agents) -> None:
        solution = await agents.solver.run(task, collect_artifacts=True)
        self._solver_failed(solution)
        await agents.judge.run(JudgeTask.from_trace(solution, self.config.task, share_runtime=False))


__all__ = [
    "AgenticJudgeEnv",
    "AgenticJudgeEnvConfig",
    "Criterion",
    "IsolatedAgenticJudgeEnv",
    "JudgeTask",
    "JudgeTaskConfig",
    "ScoreConfig",
    "SharedAgenticJudgeEnv",
    "TextFile",
]
