"""``vf eval``: run an environment against a model server with a live progress bar and a summary.

Precedence of settings: command line > the environment package's ``[tool.verifiers.eval]`` table >
built-in defaults (5 examples x 3 rollouts, 32 groups in flight: the classic tool's defaults).

Defaults sized for an interactive run, so that a stuck server or rollout never hangs the command:
each model request gets ``--request-timeout`` (120 s) and ``--max-retries`` (3) retries, and each
rollout ``--rollout-timeout`` (900 s, scoring included; 0 turns a limit off).

The exit status tells whether the run measured something: 1 when more than ``--max-error-rate``
(10 %) of the rollouts have a recorded error, or all of them. Infrastructure errors (the server
unreachable or overloaded after every retry, the machine out of file descriptors) are counted apart
and left out of the average reward; ``--resume`` runs those rollouts again. Ctrl-C or SIGTERM stop
the run and print the command that continues it; a second one stops at once.

A saved run's plan (environment and its arguments, -n, -r, model, base URL, sampling arguments) is
written to ``plan.json`` when the run starts; ``--resume`` reuses it and refuses a different value
given on the command line, so a resumed run is the same run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verifiers.cli import envs
from verifiers.cli.errors import UserError, parse_json_arg

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
BUILTIN_DEFAULTS: dict[str, Any] = {
    "num_examples": 5,
    "rollouts_per_example": 3,
    "max_concurrent": 32,
    "request_timeout": 120.0,
    "max_retries": 3,
    "timeout_per_rollout": 900.0,
    "max_error_rate": 0.1,
}
PLAN_FILE = "plan.json"
_MISSING = object()
SERVE_HINT = (
    "start a local model with `vf model tiny ./tiny-model && vf serve ./tiny-model`, or pass -b BASE_URL"
)


@dataclass
class EvalOptions:
    """Everything ``vf eval`` (and the ``vf-eval`` compatibility script) can be told."""

    env: str
    model: str | None = None
    base_url: str | None = None
    api_key_var: str | None = None
    num_examples: int | None = None
    rollouts_per_example: int | None = None
    max_concurrent: int | None = None
    max_concurrent_requests: int | None = None
    coalesce_samples: bool = False
    max_tokens: int | None = None
    temperature: float | None = None
    sampling_args_json: str | None = None
    env_args_json: str | None = None
    save: bool = True
    resume: Path | None = None
    output_dir: Path | None = None
    timeout_per_rollout: float | None = None
    request_timeout: float | None = None
    max_retries: int | None = None
    headers: list[str] = field(default_factory=list)
    show_samples: int = 1
    wait_server: float = 0.0
    max_error_rate: float | None = None
    env_dir_path: Path | None = None
    # Pre-parsed forms (the compat script parses JSON itself); they win over the *_json strings.
    sampling_args: dict[str, Any] | None = None
    env_args: dict[str, Any] | None = None
    # vf eval --push: attach the saved run to the evaluated environment version on the hub.
    push: bool = False
    push_samples: bool = False
    push_anyway: bool = False  # push even a run that is mostly errors / context overflows
    hub: str | None = None


@dataclass
class EvalPlan:
    """The fully resolved run: what ``evaluate`` is called with."""

    resolved: envs.ResolvedEnv
    env_args: dict[str, Any]
    base_url: str
    api_key: str | None
    api_key_var: str | None
    model: str
    sampling_args: dict[str, Any]
    num_examples: int
    rollouts_per_example: int
    max_concurrent: int
    max_concurrent_requests: int | None
    timeout_per_rollout: float | None
    coalesce_samples: bool
    headers: dict[str, str]
    results_path: Path | None
    resume: bool
    request_timeout: float = 120.0
    max_retries: int = 3
    env: str = ""
    max_error_rate: float = 0.1

    def saved_plan(self) -> dict[str, Any]:
        """What ``plan.json`` holds: enough to continue exactly this run (never a key's value)."""
        return {
            "env": self.env,
            "env_id": self.resolved.env_id,
            "env_args": self.env_args,
            "num_examples": self.num_examples,
            "rollouts_per_example": self.rollouts_per_example,
            "model": self.model,
            "base_url": self.base_url,
            "sampling_args": self.sampling_args,
            "api_key_var": self.api_key_var,
        }


def parse_headers(values: list[str]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for raw in values:
        name, sep, value = raw.partition(":")
        if not sep or not name.strip():
            raise UserError(f"--header must look like 'Name: Value', got {raw!r}")
        headers[name.strip()] = value.strip()
    return headers


def probe_server(
    base_url: str, api_key: str | None, headers: dict[str, str], timeout: float = 10.0
) -> list[str] | None:
    """Check that something answers at ``base_url``; return its model ids when it lists them.

    Only a failure to connect counts as unreachable: an API that wants a key answers /models with
    401, which still proves the address is right.
    """
    req = urllib.request.Request(base_url.rstrip("/") + "/models", headers=dict(headers))
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        if exc.code >= 500:  # up but not serving (still starting, overloaded): not usable yet
            raise ConnectionError(f"HTTP {exc.code}")
        if exc.code == 404 and not base_url.rstrip("/").endswith("/v1") and _answers(base_url.rstrip("/") + "/v1/models", api_key, headers, timeout):
            raise UserError(
                f"the server at {base_url} answers under /v1, not at the address given",
                hint=f"add /v1 to the base URL: -b {base_url.rstrip('/')}/v1",
            )
        return None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectionError(str(reason))
    if isinstance(body, dict) and isinstance(body.get("data"), list):
        _SERVED_BY.clear()
        _SERVED_BY.update(
            {str(m["id"]): str(m.get("owned_by") or "") for m in body["data"] if isinstance(m, dict) and m.get("id")}
        )
        return [str(m.get("id")) for m in body["data"] if isinstance(m, dict) and m.get("id")]
    return None


#: model id -> ``owned_by`` of the last /models answer (vLLM says "vllm").
_SERVED_BY: dict[str, str] = {}


def _with_token_ids(sampling: dict[str, Any], model: str) -> dict[str, Any]:
    """``-S '{"logprobs": true}'`` against vLLM: also ask for token ids, so the saved trajectory
    has the ids that go with the logprobs (what training needs). Other servers get the request as
    typed (an unknown field would be refused there)."""
    extra = sampling.get("extra_body") if isinstance(sampling.get("extra_body"), dict) else {}
    if not sampling.get("logprobs") or _SERVED_BY.get(model) != "vllm":
        return sampling
    if "return_token_ids" in sampling or "return_token_ids" in extra:
        return sampling
    return {**sampling, "extra_body": {**extra, "return_token_ids": True}}


def _answers(url: str, api_key: str | None, headers: dict[str, str], timeout: float) -> bool:
    req = urllib.request.Request(url, headers=dict(headers))
    if api_key:
        req.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout):
            return True
    except urllib.error.HTTPError as exc:
        return exc.code in (401, 403)  # there, but wants a key
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _load_saved_plan(folder: Path) -> dict[str, Any] | None:
    path = folder / PLAN_FILE
    if not path.is_file():
        return None
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not readable JSON ({exc}); cannot resume this run safely")
    if not isinstance(plan, dict):
        raise UserError(f"{path} is not a JSON object; cannot resume this run safely")
    return plan


def write_plan(folder: Path, plan: dict[str, Any]) -> None:
    """Write ``plan.json`` atomically (a resumed run reads it back)."""
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / (PLAN_FILE + ".tmp")
    tmp.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, folder / PLAN_FILE)


def _unreachable_hint(base_url: str, waited: float) -> str:
    """What to do when nothing answers at a URL the user gave: start the server there, or wait for
    one that is still starting (vLLM takes minutes to load)."""
    from urllib.parse import urlparse

    wait = "a longer --wait-server SECONDS" if waited > 0 else "--wait-server SECONDS"
    if _is_local(base_url):
        port = urlparse(base_url).port or 8000
        return (f"start a local model there (vf serve MODEL_DIR --port {port}), or give {wait} to wait "
                "for one that is still starting")
    return f"check the URL and that the server is up, or give {wait} to wait for one that is starting"


def _is_local(base_url: str) -> bool:
    from urllib.parse import urlparse

    host = (urlparse(base_url).hostname or "").lower()
    return host in ("localhost", "::1") or host.startswith("127.")


def plan_eval(opts: EvalOptions) -> EvalPlan:
    """Resolve the environment, server, model, arguments and run folder; raise UserError on problems."""
    # Parse everything the user typed before touching the network or importing the environment.
    sampling_cli = (
        opts.sampling_args
        if opts.sampling_args is not None
        else parse_json_arg(opts.sampling_args_json, "-S/--sampling-args")
    )
    env_args_cli = (
        opts.env_args if opts.env_args is not None else parse_json_arg(opts.env_args_json, "-a/--env-args")
    )
    headers = parse_headers(opts.headers)
    saved: dict[str, Any] | None = None
    if opts.resume is not None:
        if not opts.resume.is_dir():
            raise UserError(f"nothing to resume at {opts.resume}: no such run folder")
        saved = _load_saved_plan(opts.resume)
    if saved is not None:
        sampling_cli, env_args_cli = _check_resume(opts, saved, sampling_cli, env_args_cli)
    for flag, value in (("-n", opts.num_examples), ("-c", opts.max_concurrent)):
        if value is not None and (value == 0 or value < -1):
            raise UserError(f"{flag} must be a positive number (or -1: no limit)")
    if opts.rollouts_per_example is not None and opts.rollouts_per_example < 1:
        raise UserError("-r must be at least 1")

    resolved = envs.resolve(opts.env, opts.env_dir_path)
    defaults = {**BUILTIN_DEFAULTS, **resolved.defaults}

    def pick(name: str, cli_value: Any) -> Any:
        return cli_value if cli_value is not None else defaults.get(name)

    env_args = {**(defaults.get("env_args") or {}), **(env_args_cli or {})}
    sampling: dict[str, Any] = dict(defaults.get("sampling_args") or {})
    sampling.update(sampling_cli or {})
    # -S keys win over -t/-T (the classic tool's rule), which win over package defaults.
    for key, cli_value in (("max_tokens", opts.max_tokens), ("temperature", opts.temperature)):
        if key in (sampling_cli or {}):
            continue
        value = pick(key, cli_value)
        if value is not None:
            sampling[key] = value

    api_key_var = pick("api_key_var", opts.api_key_var)
    api_key: str | None = None
    if api_key_var:
        api_key = os.environ.get(api_key_var)
        if not api_key and opts.api_key_var:
            raise UserError(f"the environment variable {api_key_var} (from -k) is not set")
    elif os.environ.get("OPENAI_API_KEY"):
        api_key_var = "OPENAI_API_KEY"
        api_key = os.environ["OPENAI_API_KEY"]

    if saved is not None:  # the run being resumed decides; _check_resume refused contradictions
        env_args = dict(saved.get("env_args") or {})
        sampling = dict(saved.get("sampling_args") or {})
        if not opts.api_key_var and saved.get("api_key_var"):
            api_key_var = saved["api_key_var"]
            api_key = os.environ.get(api_key_var)
    explicit_url = opts.base_url or (saved or {}).get("base_url") or defaults.get("base_url")
    base_url = (explicit_url or os.environ.get("VF_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    deadline = time.monotonic() + max(0.0, opts.wait_server)
    while True:
        try:
            served = probe_server(base_url, api_key, headers)
            break
        except ConnectionError as exc:
            if time.monotonic() < deadline:
                time.sleep(1.0)
                continue
            waited = f" after waiting {opts.wait_server:.0f} s" if opts.wait_server > 0 else ""
            if explicit_url:
                raise UserError(
                    f"cannot reach the model server at {base_url} ({exc}){waited}",
                    hint=_unreachable_hint(base_url, opts.wait_server),
                )
            raise UserError(f"no model server is running at {base_url} ({exc}){waited}", hint=SERVE_HINT)

    model = pick("model", opts.model or (saved or {}).get("model"))
    if not model:
        if served and len(served) == 1:
            model = served[0]
        elif served:
            raise UserError(
                f"the server at {base_url} serves several models; pick one with -m ({', '.join(served[:5])})"
            )
        else:
            raise UserError(
                f"pass the model name with -m (the server at {base_url} does not list its models)"
            )
    elif served is not None and model not in served and _is_local(base_url):
        # Local servers (vLLM, vf serve) serve exactly what they list; hosted APIs may accept aliases.
        raise UserError(
            f"the server at {base_url} does not serve model {model!r}; it serves: {', '.join(served[:8])}"
        )

    if saved is None:
        sampling = _with_token_ids(sampling, model)
    results_path: Path | None = None
    resume = False
    if opts.resume is not None:
        results_path = opts.resume
        resume = True
    elif opts.save:
        root = opts.output_dir or Path("outputs")
        run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]
        results_path = (
            root / "evals" / f"{resolved.env_id.replace('/', '--')}--{model.replace('/', '--')}" / run_id
        )

    max_concurrent = int(pick("max_concurrent", opts.max_concurrent))
    rollout_timeout = pick("timeout_per_rollout", opts.timeout_per_rollout)
    request_timeout = float(pick("request_timeout", opts.request_timeout))
    max_retries = int(pick("max_retries", opts.max_retries))
    if request_timeout <= 0:
        raise UserError("--request-timeout must be a positive number of seconds")
    if max_retries < 0:
        raise UserError("--max-retries must be 0 or more")
    max_error_rate = float(pick("max_error_rate", opts.max_error_rate))
    if not 0.0 <= max_error_rate <= 1.0:
        raise UserError("--max-error-rate must be between 0 and 1 (a share of the rollouts)")
    num_examples = int(pick("num_examples", opts.num_examples))
    rollouts_per_example = int(pick("rollouts_per_example", opts.rollouts_per_example))
    if saved is not None:
        num_examples = int(saved.get("num_examples", num_examples))
        rollouts_per_example = int(saved.get("rollouts_per_example", rollouts_per_example))
    return EvalPlan(
        resolved=resolved,
        env_args=env_args,
        base_url=base_url,
        api_key=api_key,
        api_key_var=api_key_var,
        model=model,
        sampling_args=sampling,
        num_examples=num_examples,
        rollouts_per_example=rollouts_per_example,
        max_concurrent=max_concurrent,
        max_concurrent_requests=pick("max_concurrent_requests", opts.max_concurrent_requests),
        timeout_per_rollout=float(rollout_timeout) if rollout_timeout and float(rollout_timeout) > 0 else None,
        coalesce_samples=opts.coalesce_samples,
        headers=headers,
        results_path=results_path,
        resume=resume,
        request_timeout=request_timeout,
        max_retries=max_retries,
        env=opts.env,
        max_error_rate=max_error_rate,
    )


def _check_resume(
    opts: EvalOptions, saved: dict[str, Any], sampling_cli: dict[str, Any] | None, env_args_cli: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Refuse command-line values that contradict the plan of the run being resumed."""
    given: dict[str, Any] = {
        "num_examples": ("-n", opts.num_examples),
        "rollouts_per_example": ("-r", opts.rollouts_per_example),
        "model": ("-m", opts.model),
        "base_url": ("-b", opts.base_url.rstrip("/") if opts.base_url else None),
    }
    for key, (flag, value) in given.items():
        if value is not None and key in saved and value != saved[key]:
            raise UserError(
                f"--resume continues a run made with {flag} {saved[key]}; you gave {flag} {value}",
                hint=f"drop {flag} to continue it, or start a new run without --resume",
            )
    saved_env_args = saved.get("env_args") or {}
    if env_args_cli is not None and any(saved_env_args.get(k, _MISSING) != v for k, v in env_args_cli.items()):
        raise UserError(
            f"--resume continues a run made with -a {json.dumps(saved.get('env_args') or {})}; "
            f"you gave -a {json.dumps(env_args_cli)}",
            hint="drop -a to continue it, or start a new run without --resume",
        )
    sampling_saved = saved.get("sampling_args") or {}
    changed = {k: v for k, v in (sampling_cli or {}).items() if sampling_saved.get(k) != v}
    for key, value in (("max_tokens", opts.max_tokens), ("temperature", opts.temperature)):
        if value is not None and key not in (sampling_cli or {}) and sampling_saved.get(key) != value:
            changed[key] = value
    if changed:
        raise UserError(
            f"--resume continues a run sampled with {json.dumps(sampling_saved, sort_keys=True)}; "
            f"you asked for {json.dumps(changed, sort_keys=True)}",
            hint="drop the sampling flags to continue it, or start a new run without --resume",
        )
    saved_env = str(saved.get("env") or "")
    if saved_env and opts.env and opts.env != saved_env and opts.env != saved.get("env_id"):
        raise UserError(
            f"--resume continues a run of {saved_env!r}, not {opts.env!r}",
            hint=f"vf eval {saved_env} --resume {opts.resume}",
        )
    return sampling_cli, env_args_cli


def _make_client(plan: EvalPlan) -> Any:
    from verifiers.clients import ClientConfig, ModelClient

    # requests in flight are bounded by the engine (evaluate's max_concurrent_requests), whose
    # queue does not count against rollout timeouts; a second bound inside the client would
    config = ClientConfig(
        base_url=plan.base_url,
        api_key=plan.api_key,
        headers=plan.headers,
        timeout=plan.request_timeout,
        max_retries=plan.max_retries,
        coalesce_samples=plan.coalesce_samples,
    )
    return ModelClient(config)


async def _evaluate(env: Any, plan: EvalPlan, on_progress: Any, stop: _StopOnSignal | None = None) -> Any:
    if stop is not None:
        stop.attach()
    client = _make_client(plan)
    try:
        return await env.evaluate(
            client=client,
            model=plan.model,
            sampling_args=plan.sampling_args,
            num_examples=plan.num_examples,
            rollouts_per_example=plan.rollouts_per_example,
            max_concurrent=plan.max_concurrent,
            max_concurrent_requests=plan.max_concurrent_requests,
            save_results=plan.results_path is not None,
            results_path=str(plan.results_path) if plan.results_path else None,
            resume=plan.resume,
            timeout_per_rollout=plan.timeout_per_rollout,
            on_progress=on_progress,
        )
    finally:
        await client.aclose()


def run_eval(opts: EvalOptions) -> int:
    """Plan, run with a live progress bar, print the summary; return the exit code."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    from verifiers.cli.render import print_samples, summary_table

    if opts.push and not opts.save:
        raise UserError("--push uploads the saved run: drop --no-save")
    plan = plan_eval(opts)
    err = Console(stderr=True)
    out = Console()
    env = envs.load(plan.resolved, plan.env_args)
    if not hasattr(env, "evaluate"):  # a v1 env the loader found (vf eval on v1 picks the v1 eval first)
        raise UserError(f"{plan.resolved.env_id} is a v1 taskset: this command line is a classic one",
                        hint=f"vf eval {plan.resolved.env_id} -m MODEL -b URL (a v1 command line: -n, -r, --env.*)")  # fmt: skip
    err.print(
        f"[bold]{plan.resolved.env_id}[/] with [bold]{plan.model}[/] at {plan.base_url}: "
        f"{plan.num_examples if plan.num_examples >= 0 else 'all'} examples x {plan.rollouts_per_example} rollouts"
        + (f", resuming {plan.results_path}" if plan.resume else "")
    )
    progress = Progress(
        SpinnerColumn(),
        TextColumn("[bold]rollouts"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("reward [cyan]{task.fields[avg]:.3f}[/]"),
        TextColumn("errors [red]{task.fields[errors]}[/]"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=False,
    )
    task = progress.add_task("eval", total=None, avg=0.0, errors=0)

    def on_progress(event: dict[str, Any]) -> None:
        progress.update(
            task,
            completed=event.get("done", 0),
            total=event.get("total"),
            avg=float(event.get("avg_reward") or 0.0),
            errors=int(event.get("errors") or 0),
        )

    from verifiers.engine.threads import run_on_main_thread

    started = time.monotonic()
    stop = _StopOnSignal(plan)
    try:
        with contextlib.ExitStack() as stack:
            if plan.results_path is not None:
                # one run per folder: a second `vf eval --resume` on it refuses instead of doubling it
                stack.enter_context(_locked(plan.results_path))
                write_plan(plan.results_path, plan.saved_plan())
            stack.enter_context(stop)
            with progress:
                # the loop in a helper thread; the environment's sync code on this, the main thread
                result = run_on_main_thread(lambda: _evaluate(env, plan, on_progress, stop))
    except (KeyboardInterrupt, asyncio.CancelledError):
        stop.report()
        return stop.exit_code
    except _refusals() as exc:
        raise UserError(str(exc)) from None
    if stop.signals:  # the run ended on its own while a stop was being asked for
        stop.report()
        return stop.exit_code
    elapsed = time.monotonic() - started

    metadata = dict(_get(result, "metadata") or {})
    metadata.setdefault("time_ms", elapsed * 1000)
    records = _records_for_samples(result, plan.results_path, opts.show_samples)
    out.print(summary_table(metadata, title=f"{plan.resolved.env_id} / {plan.model}"))
    if opts.show_samples > 0 and records:
        print_samples(out, records[: opts.show_samples])
    if plan.results_path is not None:
        out.print(f"results: {plan.results_path}")
    stops = metadata.get("stop_conditions") or {}
    if stops.get("prompt_too_long"):
        print(
            f"warning: {stops['prompt_too_long']} rollout(s) stopped because the conversation no longer fit the "
            f"model's context (prompt_too_long); serve the model with a longer context (vf serve MODEL "
            f"--max-model-len N) or lower -t/--max-tokens",
            file=sys.stderr,
        )
    n = int(metadata.get("num_rollouts") or 0)
    n_err = int(metadata.get("num_errors") or 0)
    n_infra = int(metadata.get("num_infra_errors") or 0)
    if n_infra:
        print(
            f"warning: {n_infra} rollout(s) failed for infrastructure reasons (server unreachable or overloaded, "
            f"machine out of resources); they are left out of the reward and run again by: {resume_command(plan)}"
            if plan.results_path is not None
            else f"warning: {n_infra} rollout(s) failed for infrastructure reasons; they are left out of the reward",
            file=sys.stderr,
        )
    if n > 0 and n_err == n:
        print(f"error: all {n} rollouts failed{_first_error(plan.results_path, records)}"[:500], file=sys.stderr)
        return 1
    if n > 0 and n_err / n > plan.max_error_rate:
        print(
            f"error: {n_err} of {n} rollouts failed ({n_err / n:.0%}, above --max-error-rate "
            f"{plan.max_error_rate:g}){_first_error(plan.results_path, records)}"[:500],
            file=sys.stderr,
        )
        return 1
    if opts.push and plan.results_path is not None:
        _push_to_hub(opts, plan.results_path, out)
    return 0


_EXIT_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class _StopOnSignal:
    """Ctrl-C and SIGTERM stop a run the same way, and never inside a rollout's code.

    The first signal cancels the run from the event loop (finished rollouts are saved, the
    unfinished ones are not recorded); a second one, or one arriving while synchronous code holds
    the loop, exits at once: records are flushed one by one, so nothing finished is lost, and the
    folder's lock dies with the process. Either way the command that continues the run is printed.
    An exception is never raised into whatever code happens to be running (that would record a
    ``KeyboardInterrupt`` error on an innocent rollout).
    """

    def __init__(self, plan: EvalPlan) -> None:
        self.plan = plan
        self.signals: list[int] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self._previous: dict[int, Any] = {}

    @property
    def exit_code(self) -> int:
        return 128 + (self.signals[0] if self.signals else signal.SIGINT)

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for sig in _EXIT_SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def attach(self) -> None:
        """Called from inside the run's event loop."""
        self.loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        if self.signals:
            self.task.cancel()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)
        if len(self.signals) > 1:
            self.report(now=True)
            os._exit(self.exit_code)
        if self.loop is not None and self.task is not None:
            self.loop.call_soon_threadsafe(self.task.cancel)

    def report(self, now: bool = False) -> None:
        how = "stopped at once" if now else "interrupted"
        if self.plan.results_path is not None:
            message = f"{how}; finished rollouts are saved. Continue with: {resume_command(self.plan)}\n"
        else:
            message = f"{how}\n"
        os.write(2, message.encode("utf-8", "replace"))


def _locked(folder: Path) -> Any:
    from verifiers.utils.results import run_lock

    return run_lock(folder)


def _refusals() -> tuple[type[BaseException], ...]:
    from verifiers.utils.results import DuplicateRolloutError, RunFolderBusyError, RunFolderExistsError

    return (DuplicateRolloutError, RunFolderBusyError, RunFolderExistsError)


def _first_error(results_path: Path | None, records: list[dict[str, Any]]) -> str:
    """': source: Type: message' of the run's first error (searched in the whole results file)."""
    first = next((r.get("error") for r in records if r.get("error")), None)
    if first is None and results_path is not None and (results_path / "results.jsonl").is_file():
        with open(results_path / "results.jsonl", "rb") as fh:
            for line in fh:
                try:
                    first = json.loads(line).get("error")
                except (ValueError, AttributeError):
                    continue
                if first:
                    break
    if not isinstance(first, dict):
        return ""
    return f": {first.get('source')}: {first.get('type')}: {first.get('message')}"


def resume_command(plan: EvalPlan) -> str:
    """The command that continues exactly this run (its plan.json supplies the rest)."""
    import shlex

    command = shlex.join(["vf", "eval", plan.env or plan.resolved.env_id, "--resume", str(plan.results_path)])
    # header values may be secrets: they are neither saved nor printed
    return command + ("  (with your --header options again)" if plan.headers else "")


def _push_to_hub(opts: EvalOptions, results_path: Path, out: Any) -> None:
    push_run(opts.env, results_path, out, hub=opts.hub, samples=opts.push_samples, anyway=opts.push_anyway)


def push_run(env: str, results_path: Path, out: Any, *, hub: str | None, samples: bool, anyway: bool) -> None:
    """``--push``: post the saved run at ``results_path`` (classic or v1) to the hub as an eval
    result of the environment version it evaluated; one UserError line when it cannot."""
    from verifiers.hub_client.api import HubClient, HubClientError
    from verifiers.hub_client.config import resolve
    from verifiers.hub_client.evals import push_eval

    try:
        with HubClient(resolve(hub)) as client:
            ref, posted = push_eval(client, env, results_path, samples=samples,
                                    allow_unusable=anyway, log=lambda m: print(m, file=sys.stderr))
    except HubClientError as exc:
        raise UserError(
            f"the run is saved in {results_path} but was not pushed: {exc.message}", hint=exc.hint
        )
    out.print(
        f"pushed to the hub: {ref} (eval #{posted['id']}); leaderboard: "
        f"{client.config.url}/{ref.owner}/{ref.name}#leaderboard"
    )


def _get(result: Any, key: str) -> Any:
    try:
        return result[key]
    except (KeyError, TypeError, IndexError):
        return getattr(result, key, None)


def _records_for_samples(result: Any, results_path: Path | None, limit: int) -> list[dict[str, Any]]:
    """A few output records, read from disk when saved (the in-memory form may be lazy/bounded)."""
    limit = max(limit, 5)
    if results_path is not None and (results_path / "results.jsonl").is_file():
        from verifiers.cli.render import read_jsonl

        return read_jsonl(results_path / "results.jsonl", limit=limit)
    outputs = _get(result, "outputs") or []
    records: list[dict[str, Any]] = []
    for record in outputs:
        records.append(dict(record))
        if len(records) >= limit:
            break
    return records
