"""Every public name an environment can import from the classic releases exists here, or is listed with a reason.

The classic ``verifiers`` 0.1.7 (OLD API) and 0.3.0 (NEW API) are installed from the package index into
throwaway virtual environments (without their dependencies: only their source is read), cached under
``~/.cache/verifiers-tests`` so that reruns are fast. Their public names are listed module by module
(``tests/compat/surface.py``) for the parts environments import from: the top-level package,
``verifiers.envs.*``, ``verifiers.rubrics.*``, ``verifiers.parsers.*``, ``verifiers.utils.*``,
``verifiers.types`` and ``verifiers.errors``. A name ours lacks fails the test unless it is listed
below with the reason it is not provided.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.compat.surface import foreign_surface, surface

CLASSIC_RELEASES = ("0.1.7", "0.3.0")

# ---------------------------------------------------------------------------------------------------
# Whole modules (and packages below them) not provided, each with its reason.
# ---------------------------------------------------------------------------------------------------
OUT_OF_SCOPE_MODULES: dict[str, str] = {
    "verifiers.envs.experimental": "experimental upstream (CLI-agent, Harbor, MCP, OpenCode and composable task-set "
    "environments running on the hosted sandbox and tunnel services)",
    "verifiers.envs.integrations": "wrappers of hosted browser sandboxes and third-party gym servers (BrowserEnv, "
    "OpenEnv, TextArena, reasoning-gym) that run on the classic hosted infrastructure",
    "verifiers.envs.reasoninggym_env": "0.1.x integration wrapper of the reasoning-gym package (see verifiers.envs.integrations)",
    "verifiers.envs.textarena_env": "0.1.x integration wrapper of the TextArena game server (see verifiers.envs.integrations)",
    "verifiers.rubrics.experimental": "experimental upstream",
    "verifiers.utils.client_utils": "builds provider clients from the hosted inference service's config files; ours: "
    "vf.ModelClient / vf.ClientConfig, and environments get their client passed in",
    "verifiers.utils.display_utils": "terminal display of the classic CLI; ours is verifiers/cli/render.py",
    "verifiers.utils.eval_display": "terminal display of the classic CLI; ours is verifiers/cli/render.py",
    "verifiers.utils.env_config_utils": "config tables of the classic CLI; ours: `vf eval` and [tool.verifiers.eval]",
    "verifiers.utils.eval_utils": "the classic `vf-eval` driver; ours is verifiers/cli/eval_cmd.py (`vf eval`, `vf-eval`)",
    "verifiers.utils.heartbeat": "heartbeats of the hosted evaluation service",
    "verifiers.utils.import_utils": "a TOML-loading helper of the classic CLI (the standard library's tomllib does it)",
    "verifiers.utils.install_utils": "the classic CLI's installer for the hosted Environments Hub; ours: `vf install` "
    "and verifiers.hub_client",
    "verifiers.utils.interception_utils": "the request-interception proxy of the experimental hosted CLI-agent environments",
    "verifiers.utils.metric_utils": "running metrics of the classic eval driver; our summaries: verifiers.utils.results",
    "verifiers.utils.path_utils": "results-folder layout of the classic CLI; ours: verifiers.utils.results",
    "verifiers.utils.pricing_utils": "prices of the hosted inference service",
    "verifiers.utils.process_utils": "process management of the classic environment server (ZMQ workers)",
    "verifiers.utils.response_utils": "parsing of provider responses inside the classic clients; ours: verifiers.clients.response",
    "verifiers.utils.save_utils": "results files of the classic eval driver and their upload to the HF Hub; ours: "
    "verifiers.utils.results",
    "verifiers.utils.serve_utils": "ZMQ/msgpack transport of the classic environment server",
    "verifiers.utils.thread_utils": "executor plumbing of the classic environment server",
    "verifiers.utils.threaded_sandbox_client": "a client of the hosted sandbox service (prime-sandboxes); code written "
    "against it runs as docs/compat.md describes",
    "verifiers.utils.usage_utils": "token accounting inside the classic engine; ours records usage on the state "
    "(docs/contracts.md)",
    "verifiers.utils.version_utils": "version stamps of the classic results metadata; ours: verifiers.utils.results",
    "verifiers.utils.error_utils": "serialised error chains of the classic environment server; our rollouts record "
    "errors as {type, message, source} (verifiers.errors.error_record)",
    "verifiers.utils.processing_utils": "tokenisation for the 0.1.x built-in trainer; ours: verifiers.train",
    "verifiers.utils.report_utils": "HTML reports of the 0.1.x CLI",
}

# ---------------------------------------------------------------------------------------------------
# Single names not provided, each with its reason; "*" as module applies to every module.
# ---------------------------------------------------------------------------------------------------
_TRAINER = "the 0.1.x built-in trainer's API; ours is verifiers.train (docs/training.md)"
_CLIENTS = (
    "the NEW provider-client layer of the classic engine; ours is vf.ModelClient / vf.ClientConfig, and "
    "environments receive their client"
)
_RECORDS = (
    "a record model of the classic eval pipeline and its server protocol (pydantic); our engine hands users plain "
    "dicts with the same keys (vf.State, vf.GenerateOutputs; docs/contracts.md)"
)
_HOSTED_ENVS = "experimental / hosted-service environment (see verifiers.envs.experimental and .integrations)"
_MONITORS = "the classic engine's built-in monitor rubric (turn/tool/sandbox counters it adds itself); never built by environments"
_HOSTED_SANDBOX = (
    "state and errors of the hosted-sandbox worker protocol; our local sandbox raises vf.SandboxError "
    "subclasses (verifiers.sandbox)"
)

NAME_REASONS: dict[tuple[str, str], str] = {
    ("*", "logger"): "a module's logging.Logger object, not an API",
    ("*", "T"): "a module's TypeVar, not an API",
    ("verifiers.envs", "experimental"): _HOSTED_ENVS,
    ("verifiers.envs", "integrations"): _HOSTED_ENVS,
    **{("verifiers", n): _TRAINER for n in (
        "GRPOConfig", "GRPOTrainer", "RLConfig", "RLTrainer", "get_model", "get_model_and_tokenizer",
        "grpo_defaults", "lora_defaults",
    )},
    **{("verifiers", n): _CLIENTS for n in (
        "AnthropicMessagesClient", "Client", "OpenAIChatCompletionsClient", "OpenAICompletionsClient",
        "OpenAIResponsesClient", "RendererClient",
    )},
    **{("verifiers", n): _HOSTED_ENVS for n in (
        "BrowserEnv", "CliAgentEnv", "GymEnv", "HarborEnv", "MCPEnv", "OpenEnvEnv", "ReasoningGymEnv", "TextArenaEnv",
    )},
    **{(m, n): _RECORDS for m in ("verifiers", "verifiers.types") for n in (
        "BaseRolloutInput", "ClientType", "CustomBaseModel", "EndpointApi", "EndpointClient", "EndpointClientConfig",
        "EndpointConfig", "ErrorData", "EvalConfig", "EvalCost", "EvalRunConfig", "GenerateInputs", "GenerateMetadata",
        "LogCallback", "ModelPricing", "ProcessedOutputs", "ProgressCallback", "Response", "ResponseMessage",
        "ResponseTokens", "RolloutOutput", "RolloutTiming", "RoutedExpertsPayload", "StartCallback",
        "StateForTaskDescriptor", "TASK_INPUT_FIELDS", "ThinkingBlock", "TimeSpan", "TimeSpans", "TokenUsage",
        "TrajectoryStep", "TrajectoryStepTokens", "Usage", "VersionInfo", "assert_json_serializable",
        "flatten_task_input", "normalize_task_payload", "task_payload_from_info",
    )},
    ("verifiers.envs.multiturn_env", "MultiTurnMonitorRubric"): _MONITORS,
    ("verifiers.envs.tool_env", "ToolMonitorRubric"): _MONITORS,
    ("verifiers.envs.python_env", "PythonMonitorRubric"): _MONITORS,
    ("verifiers.envs.sandbox_env", "SandboxMonitorRubric"): _MONITORS,
    **{("verifiers.envs.python_env", n): _HOSTED_SANDBOX for n in (
        "PythonWorkerState", "PythonWorkerDeadError", "PythonWorkerNotReadyError", "PythonWorkerRequestError",
    )},
    **{("verifiers.envs.sandbox_env", n): _HOSTED_SANDBOX for n in (
        "SandboxCreationError", "SandboxNotReadyError", "SandboxState",
    )},
    ("verifiers.envs.stateful_tool_env", "filter_signature"): "an internal helper of the classic StatefulToolEnv; "
    "hiding arguments from a schema is tool_schema(func, skip=...) / add_tool(func, args_to_skip=...)",
    ("verifiers.utils.async_utils", "EventLoopLagMonitor"): "event-loop diagnostics of the classic environment server",
    ("verifiers.utils.async_utils", "EventLoopLagStats"): "event-loop diagnostics of the classic environment server",
    ("verifiers.utils.async_utils", "maybe_retry"): "the classic engine's tenacity wrapper that reruns whole rollouts; "
    "our client retries model calls itself (ModelClient(max_retries=...))",
    ("verifiers.utils.message_utils", "format_messages"): "rich-text display of the classic CLI",
    ("verifiers.utils.message_utils", "serialize_message_for_output"): "results serialisation of the classic eval "
    "driver; ours: verifiers.utils.results",
    ("verifiers.utils.message_utils", "serialize_messages_for_output"): "results serialisation of the classic eval "
    "driver; ours: verifiers.utils.results",
    ("verifiers.utils.message_utils", "get_overlong_prompt_dummy_response"): "builds a fake openai ChatCompletion for "
    "the 0.1.x engine's overlong-prompt path; our engine ends such rollouts with the prompt-too-long stop condition",
    ("verifiers.utils.env_utils", "env_module_name"): "loader internals; the id grammar and the loader have one home "
    "(verifiers.utils.env_loading)",
    ("verifiers.utils.env_utils", "import_env_module"): "loader internals; the id grammar and the loader have one home "
    "(verifiers.utils.env_loading)",
}


def _uv() -> list[str] | None:
    found = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    return [found] if found else None


def _install(version: str) -> Path:
    """The installed classic package folder of ``verifiers==version`` (installed once, then cached)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "verifiers-tests" / f"classic-{version}"
    done = cache / "installed"
    if not done.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".classic-{version}-", dir=cache.parent))
        venv = staging / "venv"
        uv = _uv()
        if uv:
            subprocess.run([*uv, "venv", "-q", str(venv)], check=True, timeout=300)
            cmd = [*uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
        else:
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
            cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
        proc = subprocess.run(
            [*cmd, "--no-deps", f"verifiers=={version}"], capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"installing verifiers=={version} from the package index failed:\n{proc.stderr}"
        (staging / "installed").write_text(version)
        shutil.rmtree(cache, ignore_errors=True)  # a half-written one from an interrupted run
        try:
            staging.rename(cache)
        except OSError:  # another run finished it first
            shutil.rmtree(staging, ignore_errors=True)
            assert done.exists(), f"could not put the install of verifiers=={version} at {cache}"
    found = sorted((cache / "venv").glob("lib/python*/site-packages/verifiers/__init__.py"))
    assert found, f"no verifiers package in {cache}"
    meta = sorted((cache / "venv").glob(f"lib/python*/site-packages/verifiers-{version}.dist-info"))
    assert meta, f"{cache} does not hold verifiers {version}"
    return found[0].parent


@pytest.fixture(scope="module")
def classic_surfaces() -> dict[str, dict[str, set[str]]]:
    return {version: surface(_install(version)) for version in CLASSIC_RELEASES}


def _out_of_scope(module: str) -> str | None:
    for prefix, reason in OUT_OF_SCOPE_MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            return reason
    return None


def _reason(module: str, name: str) -> str | None:
    return NAME_REASONS.get((module, name)) or NAME_REASONS.get(("*", name))


def _ours(module: str) -> object | None:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(exc.name + ".")):
            return None
        raise


def test_classic_releases_are_read_module_by_module(classic_surfaces) -> None:
    # the listing itself sees what environments import, so an empty or broken listing cannot pass
    old, new = classic_surfaces["0.1.7"], classic_surfaces["0.3.0"]
    assert {"MultiTurnEnv", "Rubric", "load_example_dataset", "ToolRubric"} <= old["verifiers"]
    assert {"BOXED_SYSTEM_PROMPT", "get_preprocess_fn"} <= old["verifiers.utils.data_utils"]
    assert {"Error", "InfraError", "ToolParseError", "SandboxError"} <= new["verifiers.errors"]
    assert {"Messages", "State", "Tool", "ToolCall"} <= new["verifiers.types"]
    assert "convert_func_to_tool_def" in new["verifiers.utils.tool_utils"]
    assert {"ThinkParser", "XMLParser", "stop", "cleanup", "teardown"} <= new["verifiers"]


def test_every_classic_name_exists_here_or_has_a_reason(classic_surfaces) -> None:
    missing: list[str] = []
    used_reasons: set[tuple[str, str]] = set()
    used_modules: set[str] = set()
    checked = 0
    for version, modules in classic_surfaces.items():
        for module, names in sorted(modules.items()):
            if _out_of_scope(module):
                used_modules.update(p for p in OUT_OF_SCOPE_MODULES if module == p or module.startswith(p + "."))
                continue
            ours = _ours(module)
            for name in sorted(names):
                checked += 1
                if ours is not None and hasattr(ours, name):
                    continue
                if _reason(module, name):
                    used_reasons.add((module, name) if (module, name) in NAME_REASONS else ("*", name))
                    continue
                where = "" if ours is not None else " (no such module here)"
                missing.append(f"{version} {module}:{name}{where}")
    assert checked > 300
    assert not missing, "classic public names missing here without a reason:\n" + "\n".join(missing)
    # a reason for a name we now provide, or for a module no release has, is stale: keep the lists true
    stale = sorted(set(NAME_REASONS) - used_reasons)
    assert not stale, f"reasons for names that are provided (remove them): {stale}"
    assert not sorted(set(OUT_OF_SCOPE_MODULES) - used_modules), "out-of-scope modules no release has"


def test_names_with_the_same_meaning() -> None:
    # spot checks that the provided names mean what they meant (the rest is covered by tests/sdk and tests/compat)
    from verifiers.utils import async_utils, data_utils, message_utils, tool_utils

    def add(a: int, b: int = 2) -> int:
        """Add.

        Args:
            a: first.
            b: second.
        """
        return a + b

    tool = tool_utils.convert_func_to_tool_def(add)
    # strict, as the classic library sends it: every parameter is listed, the default stays in the schema
    assert (tool.name, tool["parameters"]["required"], tool.strict) == ("add", ["a", "b"], True)
    assert tool["parameters"]["properties"]["b"]["default"] == 2
    assert data_utils.extract_boxed_answer("no box", strict=True) == ""
    assert data_utils.strip_non_numeric("$1,234.5$") == "1234.5"

    import asyncio

    async def go() -> None:
        assert await async_utils.maybe_await(add, 1, b=5) == 6
        sem = await async_utils.maybe_semaphore(None)
        async with sem:
            pass
        assert isinstance(await async_utils.maybe_semaphore(2), asyncio.Semaphore)
        assert await async_utils.maybe_call_with_named_args(add, a=1, b=1, unused=3) == 2

    asyncio.run(go())
    msgs = message_utils.get_messages(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a", "tool_calls": [
            {"id": "1", "type": "function", "function": {"name": "add", "arguments": "{}"}}]}],
        role="assistant",
    )
    assert [m.role for m in msgs] == ["assistant"]
    sanitized = message_utils.sanitize_tool_calls(msgs)
    assert isinstance(sanitized[0]["tool_calls"][0], str)

    import verifiers as vf

    @vf.reward(weight=0.5, stage="group")
    def judged() -> float:
        return 1.0

    @vf.setup(priority=3)
    def prepare() -> None:
        return None

    assert (judged.reward, judged.reward_weight, judged.reward_stage, judged.reward_priority) == (True, 0.5, "group", 0)
    assert (prepare.setup, prepare.setup_priority) == (True, 3) and vf.metric(add).metric is True


# ---------------------------------------------------------------------------------------------------
# Names of other packages that classic modules re-exported by importing them (a module without
# ``__all__`` gives ``from module import X`` every name it imported). The OpenAI SDK types of the
# top level and of ``verifiers.types`` are provided (environments import them from there:
# ``from verifiers.types import ChatCompletionMessageToolCall``); the others, per source package,
# with the reason they are not. Standard-library names (``Any``, ``Path`` ...) are never an API.
# ---------------------------------------------------------------------------------------------------
_OWN_USE = "a name the classic module imported for its own use; environments import it from {} itself"
FOREIGN_REASONS: dict[str, str] = {
    "openai": _OWN_USE.format("the openai SDK (in modules other than the top level and verifiers.types)"),
    "pydantic": _OWN_USE.format("pydantic") + "; our records are plain dicts (docs/contracts.md)",
    "anthropic": _OWN_USE.format("anthropic") + "; ours talks to OpenAI-compatible servers only",
    "renderers": "the classic engine's renderer configuration (its client layer); see _CLIENTS",
    "datasets": _OWN_USE.format("datasets"),
    "rich": _OWN_USE.format("rich") + "; terminal display of the classic CLI",
    "math_verify": _OWN_USE.format("math_verify") + "; MathRubric wraps it",
    "agents": _OWN_USE.format("the openai-agents SDK") + "; tool schemas: convert_func_to_oai_tool",
    "typing_extensions": _OWN_USE.format("typing_extensions"),
    "prime_sandboxes": "the hosted-sandbox client; docs/compat.md says how code written against it runs",
}
PROVIDED_FOREIGN_MODULES = ("verifiers", "verifiers.types")


def _foreign_reason(module: str, source: str) -> str | None:
    top = source.split(".", 1)[0]
    if top in sys.stdlib_module_names:
        return "standard library"
    if module in PROVIDED_FOREIGN_MODULES and top == "openai":
        return None  # provided: verifiers.types.OPENAI_REEXPORTS
    return FOREIGN_REASONS.get(top)


@pytest.fixture(scope="module")
def classic_foreign() -> dict[str, dict[str, dict[str, str]]]:
    return {version: foreign_surface(_install(version)) for version in CLASSIC_RELEASES}


def test_names_classic_modules_reexported_from_other_packages(classic_foreign) -> None:
    # the listing sees what environments import (an empty one cannot pass)
    assert classic_foreign["0.1.7"]["verifiers.types"]["ChatCompletionMessageToolCall"].startswith("openai.types")
    assert "ChatCompletion" in classic_foreign["0.1.7"]["verifiers"]  # through `from .types import *`
    missing: list[str] = []
    used: set[str] = set()
    for version, modules in classic_foreign.items():
        for module, names in sorted(modules.items()):
            if _out_of_scope(module):
                continue
            ours = _ours(module)
            for name, source in sorted(names.items()):
                if ours is not None and hasattr(ours, name):
                    continue
                reason = _foreign_reason(module, source)
                if reason is None:
                    missing.append(f"{version} {module}:{name} (from {source})")
                elif source.split(".", 1)[0] in FOREIGN_REASONS:
                    used.add(source.split(".", 1)[0])
    assert not missing, "re-exported names missing here without a reason:\n" + "\n".join(missing)
    assert not sorted(set(FOREIGN_REASONS) - used), "reasons for packages no classic module re-exports"


def test_openai_types_are_the_sdk_classes_and_load_lazily() -> None:
    import json

    code = (
        "import sys, json, verifiers as vf\n"
        "before = 'openai' in sys.modules\n"
        "from verifiers.types import ChatCompletionMessageToolCall, ChatCompletion, ChatCompletionToolParam\n"
        "from openai.types.chat import ChatCompletion as C\n"
        "print(json.dumps([before, vf.ChatCompletion is C is ChatCompletion, vf.AsyncOpenAI.__module__]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [False, True, "openai"]
