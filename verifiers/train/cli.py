"""`vf train CONFIG.toml [--output DIR] [--set section.key=value ...] [--role all|orchestrator|trainer]`
(registered lazily by `vf`; ``python -m verifiers.train.cli`` is the same command for ``torchrun``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Train a model with RL on environments (torch + vLLM).", add_completion=False,
                  no_args_is_help=True)


@app.command("train")
def train(
    config: Annotated[Path, typer.Argument(help="TOML config (see examples/tiny.toml)", exists=True,
                                           dir_okay=False)],
    output: Annotated[str | None, typer.Option("--output", "-o", help="run folder (default: run.output)")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s",
                                                       help="override a setting: section.key=value")] = None,
    steps: Annotated[int | None, typer.Option(help="RL steps (run.steps)")] = None,
    lr: Annotated[float | None, typer.Option(help="learning rate (trainer.optim.lr)")] = None,
    url: Annotated[list[str] | None, typer.Option("--url", help="use running servers (inference.urls)")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue from the newest checkpoint in the run folder")] = False,
    role: Annotated[str, typer.Option("--role", help="all (one command, the default) | orchestrator (environments "
                                      "+ servers) | trainer (torchrun ranks); split roles share --output")] = "all",
) -> None:
    """Train the model of CONFIG on its environments; prints the run folder at start and end."""
    from pydantic import ValidationError

    from verifiers.train.config import load_config
    from verifiers.train.loop import run_training

    if role not in ("all", "orchestrator", "trainer"):
        typer.echo(f"error: --role must be all, orchestrator or trainer, not {role!r}", err=True)
        raise typer.Exit(2)

    extra: dict[str, object] = {}
    if steps is not None:
        extra["run.steps"] = steps
    if lr is not None:
        extra["trainer.optim.lr"] = lr
    if url:
        extra["inference.urls"] = list(url)
    try:
        cfg = load_config(config, overrides or [], extra)
    except (ValidationError, ValueError) as exc:
        typer.echo(f"error: invalid config: {exc}", err=True)
        raise typer.Exit(2)
    from verifiers.train.orchestrator import NoServerError, RolloutsFailingError
    from verifiers.train.samples import MissingTokenDataError

    try:
        if role == "orchestrator":
            from verifiers.train.roles import run_orchestrator

            asyncio.run(_run_cancellable(run_orchestrator(cfg, output=output, resume=resume)))
        else:
            asyncio.run(_run_cancellable(run_training(cfg, output=output, resume=resume, role=role)))
    except (RolloutsFailingError, NoServerError, TimeoutError, MissingTokenDataError) as exc:  # one line
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None


async def _run_cancellable(coro):
    """SIGTERM cancels the run like Ctrl-C does, so vLLM servers started by the loop are stopped."""
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    try:
        return await coro
    except asyncio.CancelledError:
        typer.echo("interrupted", err=True)
        raise typer.Exit(130)


def main() -> None:  # `python -m verifiers.train.cli CONFIG.toml`
    typer.main.get_command(app)()


if __name__ == "__main__":
    main()
