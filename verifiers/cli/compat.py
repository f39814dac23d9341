"""``vf-eval``, ``vf-init``, ``vf-validate`` ...: the original tools' console scripts, on top of
``vf eval`` / ``vf init`` / ``vf validate``.

For people (and scripts) used to the original ``verifiers`` tools. The flags keep their classic
names and meanings: ``vf-eval`` saves results only with ``-s/--save-dataset`` and reads an optional
endpoint registry (``-e``, a Python file defining ``ENDPOINTS = {alias: {"model", "url", "key"}}``);
``vf-init`` writes into ``./environments/<id_with_underscores>`` by default. What differs: the
default server is a local ``vf serve`` (``$VF_BASE_URL``) rather than a hosted API, and the model
defaults to the one that server serves. ``vf-init`` writes a v1 package, as the original 0.4.0's
does (``--classic``: the classic layout). ``vf-replay`` is ``vf replay`` (``verifiers.cli.replay_cmd``);
``vf-validate`` is ``vf validate``, ``vf-debug`` is ``vf debug``; ``vf-gepa`` has no equivalent here and says so.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from typing import Any

from verifiers.cli.errors import UserError, guarded, parse_json_arg


def _eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-eval", description="Evaluate an environment (classic flags; see also `vf eval`)."
    )
    p.add_argument("env", help="environment id, package folder or .py file")
    p.add_argument("--env-args", "-a", default=None, help="load_environment arguments as a JSON object")
    p.add_argument(
        "--env-dir-path", "-p", default="./environments", help="folder of local environment packages"
    )
    p.add_argument(
        "--endpoints-path", "-e", default="./configs/endpoints.py", help="endpoint registry (Python file)"
    )
    p.add_argument(
        "--model", "-m", default=None, help="model name or registry alias (default: the server's model)"
    )
    p.add_argument("--api-key-var", "-k", default=None, help="environment variable holding the API key")
    p.add_argument(
        "--api-base-url", "-b", default=None, help="OpenAI-compatible base URL (default: local vf serve)"
    )
    p.add_argument(
        "--header", action="append", default=[], help="extra HTTP header 'Name: Value' (repeatable)"
    )
    p.add_argument("--num-examples", "-n", type=int, default=None, help="examples to evaluate (default 5)")
    p.add_argument(
        "--rollouts-per-example", "-r", type=int, default=None, help="rollouts per example (default 3)"
    )
    p.add_argument("--max-concurrent", "-c", type=int, default=None, help="groups in flight (default 32)")
    p.add_argument("--max-concurrent-requests", type=int, default=None, help="model requests in flight")
    p.add_argument("--max-tokens", "-t", type=int, default=None, help="max tokens per reply")
    p.add_argument("--temperature", "-T", type=float, default=None, help="sampling temperature")
    p.add_argument("--sampling-args", "-S", default=None, help="sampling args JSON; overrides -t/-T")
    p.add_argument("--verbose", "-v", action="store_true", help="accepted for compatibility")
    p.add_argument("--save-dataset", "-s", action="store_true", help="save results.jsonl + metadata.json")
    p.add_argument("--output-dir", "-o", default=None, help="root of run folders (default ./outputs)")
    p.add_argument("--save-to-hf-hub", "-H", action="store_true", help="not supported (offline project)")
    p.add_argument("--hf-hub-dataset-name", "-D", default="", help="not supported (offline project)")
    return p


def load_endpoints(path: Path) -> dict[str, Any]:
    """The ``ENDPOINTS`` dict of a registry file (or ``endpoints.py`` in a folder); {} when absent."""
    file = path / "endpoints.py" if path.is_dir() else path
    if not file.is_file():
        return {}
    spec = importlib.util.spec_from_file_location("_vf_endpoints", file)
    if spec is None or spec.loader is None:
        return {}
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UserError(f"cannot load the endpoint registry {file}: {type(exc).__name__}: {exc}")
    endpoints = getattr(module, "ENDPOINTS", None)
    if not isinstance(endpoints, dict):
        raise UserError(f"the endpoint registry {file} defines no ENDPOINTS dict")
    return endpoints


@guarded
def _vf_eval(argv: list[str] | None) -> int:
    from verifiers.cli.eval_cmd import EvalOptions, run_eval

    args = _eval_parser().parse_args(argv)
    if args.save_to_hf_hub or args.hf_hub_dataset_name:
        raise UserError("pushing results to the Hugging Face Hub is not supported; save locally with -s")
    model, base_url, key_var = args.model, args.api_base_url, args.api_key_var
    if model is not None:
        entry = load_endpoints(Path(args.endpoints_path)).get(model)
        if isinstance(entry, dict):
            model = entry.get("model", model)
            base_url = base_url or entry.get("url")
            key_var = key_var or entry.get("key")
    opts = EvalOptions(
        env=args.env,
        model=model,
        base_url=base_url,
        api_key_var=key_var,
        num_examples=args.num_examples,
        rollouts_per_example=args.rollouts_per_example,
        max_concurrent=args.max_concurrent,
        max_concurrent_requests=args.max_concurrent_requests,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        sampling_args=parse_json_arg(args.sampling_args, "-S/--sampling-args"),
        env_args=parse_json_arg(args.env_args, "-a/--env-args"),
        save=args.save_dataset,
        output_dir=Path(args.output_dir) if args.output_dir else None,
        headers=args.header,
        env_dir_path=Path(args.env_dir_path),
    )
    return run_eval(opts)


def _init_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vf-init",
        description="Create an environment package: a v1 taskset, as the original 0.4.0 tool does, or "
        "--classic (the 0.1.x / 0.3.x tool's layout); see also `vf init`.",
    )
    p.add_argument("env", help="environment id, e.g. my-env")
    p.add_argument("--path", "-p", default="./environments", help="parent folder (default ./environments)")
    p.add_argument("--add-tool", "-T", action="store_true", help="v1: also a toolset the model may call")
    p.add_argument("--add-harness", "-H", action="store_true", help="v1: also a harness of the package's own")
    p.add_argument("--force", action="store_true", help="v1: overwrite files that already exist")
    p.add_argument("--classic", action="store_true", help="the classic-API package instead")
    p.add_argument("--rewrite-readme", action="store_true", help="classic: rewrite README.md if it exists")
    return p


@guarded
def _vf_init(argv: list[str] | None) -> int:
    from verifiers.cli.init_cmd import init_environment, normalise_id, split_owner
    from verifiers.ids import module_name_for

    args = _init_parser().parse_args(argv)
    if not args.classic:
        from verifiers.cli.init_v1 import init_v1_environment

        if args.rewrite_readme:
            raise UserError("--rewrite-readme is for the classic scaffold (--classic); v1 takes --force")
        init_v1_environment(args.env, Path(args.path), force=args.force, add_tool=args.add_tool, add_harness=args.add_harness)
        return 0
    if args.add_tool or args.add_harness:
        raise UserError("--add-tool and --add-harness are for the v1 scaffold; drop --classic (or them)")
    # The classic tool names the folder after the module (underscores).
    init_environment(
        args.env,
        Path(args.path),
        force=args.force,
        folder_name=module_name_for(normalise_id(split_owner(args.env)[1])),
        rewrite=("README.md",) if args.rewrite_readme else (),
    )
    return 0


#: The original 0.4.0's console scripts with no command of their own here: what each did, and the
#: nearest command of ours.
NO_EQUIVALENT = {
    "vf-gepa": (
        "optimises a taskset's prompts with GEPA against a model; this version has no prompt optimiser",
        "vf eval TASKSET compares prompts run by run (--env.taskset.system-prompt FILE)",
    ),
}


def _no_equivalent(script: str) -> None:
    what, nearest = NO_EQUIVALENT[script]
    args = sys.argv[1:]
    if any(a in ("-h", "--help") for a in args):
        print(f"{script}: in the original verifiers 0.4.0, {what}.\nnearest here: {nearest}")
        sys.exit(0)
    print(f"error: {script} is not available: in the original verifiers 0.4.0 it {what}", file=sys.stderr)
    print(f"hint: {nearest}", file=sys.stderr)
    sys.exit(2)


def vf_debug_main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-debug`` (the original's name of ``vf debug``)."""
    from verifiers.cli.debug_cmd import main as debug_main

    debug_main(argv)


def vf_gepa_main() -> None:
    """Console-script entry point of ``vf-gepa`` (no equivalent: one clear message)."""
    _no_equivalent("vf-gepa")


def vf_eval_main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-eval`` (a v1 environment or config goes to the v1 eval,
    as the original's ``vf-eval`` does)."""
    from verifiers.cli.v1_eval import main as v1_main
    from verifiers.cli.v1_eval import wants_v1

    args = sys.argv[1:] if argv is None else argv
    if wants_v1(args):
        v1_main(args)
    sys.exit(_vf_eval(argv))


def vf_init_main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-init``."""
    sys.exit(_vf_init(argv))


def vf_validate_main(argv: list[str] | None = None) -> None:
    """Console-script entry point of ``vf-validate`` (the original's name of ``vf validate``)."""
    from verifiers.cli.validate_cmd import main as validate_main

    validate_main(argv)
