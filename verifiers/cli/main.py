"""The ``vf`` app: command signatures only; implementations are imported when a command runs.

Sub-apps owned by other parts (``vf hub`` from ``hub.cli``, ``vf train`` from
``verifiers.train.cli``) are registered lazily through :data:`LAZY_APPS`: their modules (FastAPI,
SQLAlchemy, torch ...) load only when that sub-command is invoked, and a missing module gives a
clear message instead of breaking every other command.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.core

from verifiers.cli.errors import UserError, guarded

app = typer.Typer(
    name="vf",
    help="Verifiers: evaluate RL environments, scaffold them, and serve a local model.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
)
model_app = typer.Typer(help="Create local models (no download).", no_args_is_help=True)
app.add_typer(model_app, name="model")

#: Sub-apps living in other packages: command name -> (module, attribute, one-line help).
LAZY_APPS: dict[str, tuple[str, str, str]] = {
    "hub": ("hub.cli", "app", "Run and administer an Environments Hub (vf hub --help)."),
    "train": ("verifiers.train.cli", "app", "Train a model on environments (vf train CONFIG.toml)."),
}


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("verifiers")
    except Exception:  # running from a source tree that is not installed
        return "unknown"


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"verifiers {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", "-V", help="Show the version and exit.", callback=_version_callback, is_eager=True
        ),
    ] = False,
) -> None:
    """Verifiers: evaluate RL environments, scaffold them, and serve a local model."""


# ----------------------------------------------------------------------------------------- eval
@app.command("eval")
@guarded
def eval_command(
    env: Annotated[str, typer.Argument(help="Installed environment id, a package folder, or a .py file.")],
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model name (default: the server's first model).")
    ] = None,
    base_url: Annotated[
        str | None,
        typer.Option(
            "--base-url", "-b", help="OpenAI-compatible base URL (default: $VF_BASE_URL or a local vf serve)."
        ),
    ] = None,
    api_key_var: Annotated[
        str | None,
        typer.Option("--api-key-var", "-k", help="Name of the environment variable holding the API key."),
    ] = None,
    num_examples: Annotated[
        int | None, typer.Option(
            "--num-examples", "-n",
            help="Examples to evaluate (-1: all; default 5, or the package's tool.verifiers.eval table).",
        )
    ] = None,
    rollouts_per_example: Annotated[
        int | None, typer.Option(
            "--rollouts-per-example", "-r",
            help="Rollouts per example (default 3, or the package's tool.verifiers.eval table).",
        )
    ] = None,
    max_concurrent: Annotated[
        int | None, typer.Option("--max-concurrent", "-c", help="Example groups in flight (default 32).")
    ] = None,
    max_concurrent_requests: Annotated[
        int | None, typer.Option("--max-concurrent-requests", help="Model requests in flight.")
    ] = None,
    coalesce_samples: Annotated[
        bool,
        typer.Option(
            "--coalesce-samples",
            help="Send the identical first requests of an example's rollouts as one request with n "
            "(servers that implement n: vLLM, OpenAI).",
        ),
    ] = False,
    max_tokens: Annotated[
        int | None, typer.Option("--max-tokens", "-t", help="Max tokens per model reply.")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option("--temperature", "-T", help="Sampling temperature.")
    ] = None,
    sampling_args: Annotated[
        str | None,
        typer.Option(
            "--sampling-args", "-S", help="Sampling args as a JSON object; its keys override -t/-T."
        ),
    ] = None,
    env_args: Annotated[
        str | None,
        typer.Option("--env-args", "-a", help="load_environment keyword arguments as a JSON object."),
    ] = None,
    save: Annotated[
        bool, typer.Option("--save/--no-save", help="Save results.jsonl + metadata.json.")
    ] = True,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Continue a run folder, skipping finished rollouts; the run's saved plan (-n, -r, -m, -b, "
            "-a, sampling) is reused and a different value is refused.",
        ),
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Root of run folders (default ./outputs).")
    ] = None,
    timeout_per_rollout: Annotated[
        float | None,
        typer.Option(
            "--rollout-timeout",
            "--timeout-per-rollout",
            help="Seconds one rollout may take, scoring included; time waiting for a request slot does "
            "not count (default 900; 0: no limit).",
        ),
    ] = None,
    request_timeout: Annotated[
        float | None,
        typer.Option("--request-timeout", help="Seconds one model request may take (default 120)."),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option("--max-retries", help="Retries of a failed model request (429, 5xx, no answer; default 3)."),
    ] = None,
    header: Annotated[
        list[str] | None, typer.Option("--header", help="Extra HTTP header 'Name: Value' (repeatable).")
    ] = None,
    samples: Annotated[int, typer.Option("--show-samples", help="Sample rollouts to print at the end.")] = 1,
    push: Annotated[
        bool, typer.Option("--push", help="Upload the run's summary to the hub as an eval result.")
    ] = False,
    push_samples: Annotated[
        bool, typer.Option("--push-samples", help="With --push: include up to 50 sample rollouts.")
    ] = False,
    push_anyway: Annotated[
        bool,
        typer.Option(
            "--push-anyway",
            help="With --push: push even when more than half the rollouts errored or did not fit the "
            "model's context (refused otherwise).",
        ),
    ] = False,
    hub: Annotated[str | None, typer.Option("--hub", help="Hub URL for --push (default: vf login).")] = None,
    wait_server: Annotated[
        float,
        typer.Option(
            "--wait-server", help="Seconds to wait for the server to come up (e.g. just after vf serve &)."
        ),
    ] = 0.0,
    max_error_rate: Annotated[
        float | None,
        typer.Option(
            "--max-error-rate",
            help="Exit 1 when more than this share of the rollouts failed (default 0.1).",
        ),
    ] = None,
) -> None:
    """Evaluate an environment against a model behind an OpenAI-compatible server."""
    from verifiers.cli.eval_cmd import EvalOptions, run_eval

    opts = EvalOptions(
        env=env,
        model=model,
        base_url=base_url,
        api_key_var=api_key_var,
        num_examples=num_examples,
        rollouts_per_example=rollouts_per_example,
        max_concurrent=max_concurrent,
        max_concurrent_requests=max_concurrent_requests,
        coalesce_samples=coalesce_samples,
        max_tokens=max_tokens,
        temperature=temperature,
        sampling_args_json=sampling_args,
        env_args_json=env_args,
        save=save,
        resume=resume,
        output_dir=output_dir,
        timeout_per_rollout=timeout_per_rollout,
        request_timeout=request_timeout,
        max_retries=max_retries,
        headers=header or [],
        show_samples=samples,
        push=push or push_samples,
        push_samples=push_samples,
        push_anyway=push_anyway,
        hub=hub,
        wait_server=wait_server,
        max_error_rate=max_error_rate,
    )
    raise typer.Exit(run_eval(opts))


# -------------------------------------------------------------------------------------- results
@app.command("results")
@guarded
def results_command(
    path: Annotated[Path, typer.Argument(help="A run folder, its results.jsonl, or a folder of runs.")],
    samples: Annotated[int, typer.Option("--samples", "-n", help="Sample rollouts to show.")] = 3,
    errors_only: Annotated[
        bool, typer.Option("--errors", help="Show only rollouts that recorded an error.")
    ] = False,
) -> None:
    """Show a saved run: its summary, a few samples, rewards and errors."""
    from verifiers.cli.results_cmd import show_results

    show_results(path, samples=samples, errors_only=errors_only)


# ----------------------------------------------------------------------------------------- init
@app.command("init")
@guarded
def init_command(
    name: Annotated[str, typer.Argument(help="Environment id, e.g. my-env (module: my_env).")],
    path: Annotated[
        Path | None,
        typer.Option("--path", "-p", help="Parent folder (default: ./environments if present, else .)."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist.")] = False,
    classic: Annotated[
        bool,
        typer.Option("--classic", help="The classic-API package (load_environment, a rubric, its own test)."),
    ] = False,
    add_tool: Annotated[
        bool, typer.Option("--add-tool", "-T", help="v1: also a toolset the model may call.")
    ] = False,
    add_harness: Annotated[
        bool, typer.Option("--add-harness", "-H", help="v1: also a harness of the package's own (harness.py).")
    ] = False,
) -> None:
    """Scaffold an environment package: a v1 taskset (the default), or --classic."""
    if classic:
        if add_tool or add_harness:
            raise UserError("--add-tool and --add-harness are for the v1 scaffold; drop --classic (or them)")
        from verifiers.cli.init_cmd import init_environment

        init_environment(name, path, force=force)
        return
    from verifiers.cli.init_v1 import init_v1_environment

    init_v1_environment(name, path, force=force, add_tool=add_tool, add_harness=add_harness)


# --------------------------------------------------------------------------------------- replay
@app.command(
    "replay",
    add_help_option=False,  # the replay parser's own --help (shared with vf-replay)
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def replay_command(ctx: typer.Context) -> None:
    """Re-score saved v1 traces (a run folder or its traces.jsonl) without calling the model."""
    from verifiers.cli.replay_cmd import main as replay_main

    replay_main(list(ctx.args))


# ---------------------------------------------------------------------------------------- check
@app.command("check")
@guarded
def check_command(
    env: Annotated[str, typer.Argument(help="Environment id, package folder or .py file.")],
    env_args: Annotated[
        str | None,
        typer.Option("--env-args", "-a", help="load_environment keyword arguments as a JSON object."),
    ] = None,
    num_examples: Annotated[int, typer.Option("--num-examples", "-n", help="Examples to run.")] = 2,
    rollouts_per_example: Annotated[
        int, typer.Option("--rollouts-per-example", "-r", help="Rollouts per example.")
    ] = 2,
    timeout_per_rollout: Annotated[
        float, typer.Option("--timeout-per-rollout", help="Seconds before a rollout counts as stuck.")
    ] = 120.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the verdict as one JSON document (exit 1 on failure).")
    ] = False,
) -> None:
    """Check that an environment loads, has rows, runs scripted rollouts and tears down cleanly."""
    from verifiers.cli.check_cmd import run_check

    raise typer.Exit(
        run_check(
            env,
            env_args_json=env_args,
            num_examples=num_examples,
            rollouts_per_example=rollouts_per_example,
            timeout_per_rollout=timeout_per_rollout,
            as_json=as_json,
        )
    )


@app.command(
    "debug",
    add_help_option=False,  # `vf debug --help` is its own parser's (verifiers/cli/debug_cmd.py)
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def debug_command(ctx: typer.Context) -> None:
    """Set up each task of a v1 taskset in a fresh runtime, run one shell command or script there, and
    save each task's trace with the outcome (the original vf-debug; vf debug --help)."""
    from verifiers.cli.debug_cmd import main as debug_main

    debug_main(list(ctx.args))


@app.command(
    "validate",
    add_help_option=False,  # `vf validate --help` is its own parser's (verifiers/cli/validate_cmd.py)
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def validate_command(ctx: typer.Context) -> None:
    """Validate an environment with the original vf-validate's options (v1 or classic): its tasks, a
    few scripted episodes, traces, rewards, teardown; --json for the verdict (vf validate --help)."""
    from verifiers.cli.validate_cmd import main as validate_main

    validate_main(list(ctx.args))


# ---------------------------------------------------------------------------------- model, serve
@model_app.command("tiny")
@guarded
def model_tiny_command(
    out_dir: Annotated[Path, typer.Argument(help="Folder to write the model into.")],
    vocab: Annotated[
        str, typer.Option("--vocab", help="chars (printable ASCII + byte fallback) or bytes.")
    ] = "chars",
    hidden: Annotated[int, typer.Option("--hidden", help="Hidden size.")] = 128,
    layers: Annotated[int, typer.Option("--layers", help="Transformer layers.")] = 2,
    heads: Annotated[int, typer.Option("--heads", help="Attention heads.")] = 2,
    kv_heads: Annotated[
        int | None, typer.Option("--kv-heads", help="Key/value heads (default: heads).")
    ] = None,
    head_dim: Annotated[
        int, typer.Option("--head-dim", help="Head dimension (vLLM CPU: 64 works, 16 fails).")
    ] = 64,
    intermediate: Annotated[int, typer.Option("--intermediate", help="MLP size.")] = 256,
    max_positions: Annotated[int, typer.Option("--max-positions", help="Maximum sequence length.")] = 2048,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random initialisation.")] = 0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace the contents of a non-empty folder.")
    ] = False,
) -> None:
    """Write a tiny random Llama-style model with a character-level tokenizer (no download)."""
    from verifiers.cli.serve_cmd import make_tiny_model

    make_tiny_model(
        out_dir,
        vocab=vocab,
        hidden=hidden,
        layers=layers,
        heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        intermediate=intermediate,
        max_positions=max_positions,
        seed=seed,
        force=force,
    )


@app.command("serve")
@guarded
def serve_command(
    model_dir: Annotated[Path, typer.Argument(help="Model folder (e.g. from vf model tiny).")],
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8000,
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    max_model_len: Annotated[
        int | None,
        typer.Option(
            "--max-model-len",
            help="Context length in tokens (default: the model's own, at most 8192; vf model tiny: 2048).",
        ),
    ] = None,
    dev_mode: Annotated[
        bool,
        typer.Option("--dev-mode", help="Expose /collective_rpc, /pause ... (weight reloads for training)."),
    ] = False,
    served_model_name: Annotated[
        str | None,
        typer.Option("--served-model-name", help="Model name clients send (default: folder name)."),
    ] = None,
    log_file: Annotated[
        str | None,
        typer.Option(
            "--log-file",
            help="Where vLLM's own output goes (default: $VF_HOME/logs/vllm-PORT.log; '-': this terminal).",
        ),
    ] = None,
    extra: Annotated[list[str] | None, typer.Argument(help="Extra vLLM flags after --.")] = None,
) -> None:
    """Serve a model folder with a real vLLM OpenAI-compatible server (installs vLLM on first use)."""
    from verifiers.cli.serve_cmd import serve

    raise typer.Exit(
        serve(
            model_dir,
            port=port,
            host=host,
            max_model_len=max_model_len,
            dev_mode=dev_mode,
            served_model_name=served_model_name,
            log_file=log_file,
            extra_args=extra or [],
        )
    )


@app.command("serve-env")
@guarded
def serve_env_command(
    target: Annotated[str, typer.Argument(metavar="ID|@CONFIG", help="An environment id (v1 taskset or classic), or @config.toml with [env] and [serve].")],
    workers: Annotated[int | None, typer.Option("--workers", "-w", help="Worker processes (default: [serve.pool], else 1).")] = None,
    address: Annotated[
        str | None,
        typer.Option("--address", help="ZMQ address to bind (default tcp://127.0.0.1:5000; another host exposes the env to the network)."),
    ] = None,
    max_concurrent: Annotated[int | None, typer.Option("--max-concurrent", "-c", help="Runs in flight per worker (default 64).")] = None,
    max_queued: Annotated[int | None, typer.Option("--max-queued", help="Runs waiting beyond that before new ones are refused (default 1024).")] = None,
    reschedule: Annotated[int | None, typer.Option("--reschedule", help="Times a run whose worker died is played again (default 1).")] = None,
    min_workers: Annotated[int | None, typer.Option("--min-workers", help="Elastic pool: workers kept up when idle (default 1).")] = None,
    max_workers: Annotated[int | None, typer.Option("--max-workers", help="Elastic pool: most workers it grows to under queued load.")] = None,
    env_args: Annotated[str | None, typer.Option("--env-args", "-a", help="JSON keywords for the environment's load_environment.")] = None,
    allow_env: Annotated[
        list[str] | None,
        typer.Option("--allow-env", help="An environment variable of this server that clients' configs may name (api_key_var, headers_from_env); repeatable. Others that are set are refused."),
    ] = None,
) -> None:
    """Serve an environment (v1, or classic as v1 episodes) to env-server clients (e.g. prime-rl's orchestrator) from a pool of workers."""
    from verifiers.v1.serve.cli import main as serve_env_main
    from verifiers.v1.serve.cli import parse_env_args

    raise typer.Exit(serve_env_main(target, workers=workers, address=address, max_concurrent=max_concurrent,
                                    max_queued=max_queued, reschedule=reschedule, min_workers=min_workers,
                                    max_workers=max_workers, env_args=parse_env_args(env_args), allow_env=allow_env))  # fmt: skip


# ------------------------------------------------------------------------------ lazy sub-apps
def _run_lazy_app(name: str, ctx: typer.Context) -> None:
    module_name, attr, _ = LAZY_APPS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise UserError(
                f"`vf {name}` is not available: its module {module_name} is not installed in this environment"
            )
        raise UserError(
            f"`vf {name}` needs the Python package {missing!r}, which is not installed",
            hint="pip install 'verifiers[hub,train]'",
        )
    sub_app = getattr(module, attr, None)
    if sub_app is None:
        raise UserError(f"`vf {name}` is not available: {module_name} defines no {attr!r}")
    command = typer.main.get_command(sub_app) if isinstance(sub_app, typer.Typer) else sub_app
    # -h works like everywhere else in vf (the sub-app's own context settings may only know --help)
    command.main(
        args=list(ctx.args), prog_name=f"vf {name}", standalone_mode=True, help_option_names=["-h", "--help"]
    )


def _register_lazy(name: str) -> None:
    help_text = LAZY_APPS[name][2]

    @app.command(
        name,
        help=help_text,
        add_help_option=False,  # `vf hub --help` is the sub-app's help, not this proxy's
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        rich_help_panel="Other parts",
    )
    @guarded
    def _proxy(ctx: typer.Context) -> None:
        _run_lazy_app(name, ctx)


for _name in LAZY_APPS:
    _register_lazy(_name)

# vf login / push / install / pull / search / info / yank ... (the hub client side).
from verifiers.cli.hub_cmds import register as _register_hub_commands  # noqa: E402

_register_hub_commands(app)


class PlainHelpCommand(typer.core.TyperCommand):
    """A command whose ``--help`` is click's plain layout: rich's option table squeezes six columns
    into the terminal and cuts long flag names ("--max-concurrent-requ…") at 80 columns, while the
    plain layout wraps only the help text and never shortens a flag."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        super(typer.core.TyperCommand, self).format_help(ctx, formatter)  # click's own, past typer's rich one


for _info in app.registered_commands:  # every vf command (the command list itself stays rich)
    if _info.cls in (None, typer.core.TyperCommand):
        _info.cls = PlainHelpCommand


def main() -> None:
    """Console-script entry point of ``vf``."""
    argv = sys.argv[1:]
    try:
        if argv[:1] == ["eval"]:
            from verifiers.cli.v1_eval import main as v1_main
            from verifiers.cli.v1_eval import wants_v1

            if wants_v1(argv[1:]):  # a v1 environment or config: its own flags (verifiers/cli/v1_eval.py)
                v1_main(argv[1:])
        app()
    except SystemExit as exc:
        _exit_past_stuck_threads(exc.code)
        raise


def _exit_past_stuck_threads(code: Any) -> None:
    """Exit even when code the command ran left threads that never end.

    A tool that runs its work in its own thread pool and gives up on it (``future.result(timeout=
    ...)``) leaves a worker thread that Python joins at exit, forever. Once the command is done,
    run the exit hooks (environment teardown) ourselves, give such threads a moment, then leave
    without waiting for them, saying so.
    """
    import atexit
    import os
    import threading

    def stuck() -> list[threading.Thread]:
        # Python joins at exit every non-daemon thread and every ThreadPoolExecutor worker (even a
        # daemon one: a pool made from a daemon thread has daemon workers, joined all the same)
        import concurrent.futures.thread as pool_threads

        joined = set(getattr(pool_threads, "_threads_queues", {}))
        me = threading.current_thread()
        return [t for t in threading.enumerate() if t is not me and t.is_alive() and (not t.daemon or t in joined)]

    if not stuck():
        return
    atexit._run_exitfuncs()
    for thread in stuck():
        thread.join(timeout=1.0)  # a bound for threads that are about to end, not a measurement
    left = stuck()
    if not left:
        return
    names = ", ".join(t.name for t in left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
    sys.stdout.flush()
    print(f"note: {len(left)} thread(s) started during the command never ended ({names}); exiting without them",
          file=sys.stderr)  # fmt: skip
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else (0 if code is None else 1))


if __name__ == "__main__":
    main()
