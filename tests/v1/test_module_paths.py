"""Every module path of the original ``verifiers.v1`` (0.4.0) imports here, with the public names it
defines there, or has a written reason.

Environments, harness packages and tasksets written for the original import from submodules
(``from verifiers.v1.configs.task import TaskConfig``, ``from verifiers.v1.runtimes.base import
Runtime``, ``from verifiers.v1.utils.git import capture_patch``), not only from ``verifiers.v1``.
The names test (``test_v1_surface.py``) covers the package's own namespace; this one covers the
paths. The release is installed from the package index without dependencies; its source is read
with ``ast``, never imported.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

from tests.compat.surface import module_files, public_names
from tests.compat.test_classic_surface import _install
from tests.v1.test_v1_surface import REASONS as API_REASONS

_ACP = "ACP harnesses (agent programs over the Agent Client Protocol) are not here; the Harness plugin API takes third-party harnesses"
_CLI = "the original's command-line implementation; ours is vf eval / validate / replay / init (verifiers.cli) with its TOML keys and console-script names"
_CLIENT = "the original's live client classes (verifiers.v1.clients.eval/train/base): the v1 agents' model client is our ModelClient (verifiers.clients), made from the client configs (verifiers.v1.configs.client)"
_DIALECT = "provider dialects of the interception proxy (Anthropic messages, OpenAI responses): ours speaks OpenAI chat completions, streaming included"
_GEPA = "prompt optimisation (GEPA) is not here; vf-gepa says so in one line"
_PROGRAM = "an agent-program harness not bundled here; docs/v1.md says which would run in our sandbox the way mini_swe_agent does and what each needs"
_HARNESS_UTILS = "the original's chat-program internals (its bundled loop, MCP client, installs into containers); plugins use harnesses.utils.launch, whose chat program runs in process here"
_INTERCEPTION = "internals of the original's interception proxy (pools, tunnels to remote sandboxes); ours is one loopback proxy in verifiers.v1.interception"
_MCP = "internals of the original's MCP tool servers; ours launch through verifiers.v1.mcp (Toolset, per rollout or shared)"
_RUNTIME = "runtime process objects and registries of the original's container and hosted runtimes; configs load and a run is refused at start"
_RUNTIME_NAMES = "runtime internals (process handles, info records, GPU parsing) of the original; our runtimes keep run / run_program / read / write"
_SERVE = "env-server internals beyond the wire shapes (verifiers.v1.wire holds DeltaStreamer / EpisodeAssembly; verifiers.v1.serve the server, pool and client)"
_SESSION = "the original's per-rollout request session (idempotent replay of proxy requests); ours records each model call once in verifiers.v1.interception"
_GYM = "bridges to NeMo Gym and OpenEnv servers are not here (importing them is one ImportError that says so)"
_EVAL_INTERNALS = "internals of the original's eval command and hosted platform (progress formatting, logging set-up, memory trimming, run scope, trace store, version stamp)"
_ENV = "shared env configs and agent-default merging of the original's multi-env runs: not here"
_PLUGINS = "config narrowing and merging live in verifiers.v1.plugins"
_DECORATORS = "the original's decorator plumbing; ours tags in verifiers.v1.decorators and calls hooks in verifiers.v1.scoring"

# module (or package prefix, ending in '.') -> why it is not here
MODULE_REASONS: dict[str, str] = {
    "verifiers.v1.acp": _ACP,
    "verifiers.v1.acp.": _ACP,
    "verifiers.v1.cli": _CLI,
    "verifiers.v1.cli.": _CLI,
    "verifiers.v1.configs.cli": _CLI,
    "verifiers.v1.configs.cli.": _CLI,
    "verifiers.v1.clients.": _CLIENT,
    "verifiers.v1.configs.serve": _SERVE,
    "verifiers.v1.dialects.": _DIALECT,
    "verifiers.v1.gepa": _GEPA,
    "verifiers.v1.gepa.": _GEPA,
    **{
        f"verifiers.v1.harnesses.{name}{tail}": _PROGRAM
        for name in ("browser_use", "claude_code", "codex", "hermes_agent", "kimi_code", "openclaw", "pi", "prime_agent",
                     "rlm", "terminus_2")
        for tail in ("", ".")
    },
    "verifiers.v1.harnesses.node": _PROGRAM,
    **{f"verifiers.v1.harnesses.utils.{name}": _HARNESS_UTILS for name in ("core", "install", "mcp")},
    "verifiers.v1.interception.": _INTERCEPTION,
    "verifiers.v1.mcp.launch": _MCP,
    "verifiers.v1.mcp.server": _MCP,
    "verifiers.v1.runtimes.container": _RUNTIME,
    "verifiers.v1.runtimes.docker.egress": _RUNTIME,
    "verifiers.v1.runtimes.limiters": _RUNTIME,
    "verifiers.v1.serve.delta": _SERVE,
    "verifiers.v1.serve.encoding": _SERVE,
    "verifiers.v1.serve.types": _SERVE,
    "verifiers.v1.session": _SESSION,
    "verifiers.v1.harnesses.mini_swe_agent.program": "the original's mini-swe-agent launcher script (run under uv in a container); ours runs mini from its tool folder in the sandbox",
    "verifiers.v1.tasksets.harbor.compose": "Docker compose services of Harbor tasks: a task that needs Docker is refused on the sandbox runtime",
    "verifiers.v1.tasksets.harbor.env": "Harbor's separate-verifier env (HarborEnv) is not here: such tasks are refused unless ignore_separate_verifier",
    "verifiers.v1.tasksets.harbor.toolset": "Harbor tasks' MCP servers are not here",
    **{f"verifiers.v1.tasksets.{name}{tail}": _GYM for name in ("nemo_gym", "openenv") for tail in ("", ".")},
    **{
        f"verifiers.v1.utils.{name}": _EVAL_INTERNALS
        for name in ("compile", "eval", "format", "interrupt", "logging", "memory", "platform", "prime", "scope",
                     "trace_store", "version")
    },
}

# (module, name) -> why that name of a module that is here is not
NAME_REASONS: dict[tuple[str, str], str] = {
    **{("verifiers.v1.configs.agent", n): _ENV for n in ("merge_agent_defaults", "resolve_agent")},
    **{("verifiers.v1.configs.env", n): _ENV for n in ("SharedEnvConfig", "default_agent_harness")},
    **{("verifiers.v1.configs.harness", n): "harness program pins and skills of the original's program harnesses"
       for n in ("PinnedVersion", "SkillSource", "WireHarnessConfig", "skill_destination")},
    **{("verifiers.v1.configs.judge", n): "judge-list checks of the original's config layer; ours validate in JudgeConfig"
       for n in ("check_judges", "judge_key")},
    ("verifiers.v1.configs.select", "IDX_RANGE"): "the original's private pattern for idx ranges; ours parse the same syntax in SelectConfig",
    **{("verifiers.v1.configs.runtime", n): "network policies of container runtimes; our sandbox's egress allow-list is verifiers.sandbox.egress"
       for n in ("NetworkPolicyConfig", "intersect_network_hosts", "network_rule_matches", "parse_network_rule")},
    **{("verifiers.v1.runtimes.base", n): _RUNTIME_NAMES
       for n in ("BaseRuntimeInfo", "SERVICE_PORT", "cleanup_at_exit", "parse_gpu", "register")},
    **{("verifiers.v1.runtimes.subprocess", n): _RUNTIME_NAMES
       for n in ("SubprocessRuntimeInfo", "read_stream", "signal_process")},
    **{("verifiers.v1.runtimes.docker", n): _RUNTIME
       for n in ("BaseRuntimeInfo", "ContainerConfig", "ContainerRuntime", "DockerRuntime", "DockerRuntimeInfo", "EgressProxy",
                 "NetworkPolicy", "NetworkPolicyConfig", "PodmanRuntime", "PodmanRuntimeInfo", "SERVICE_PORT", "cli",
                 "is_loopback_host", "parse_gpu", "run_scope", "Runtime", "SandboxError")},
    **{("verifiers.v1.runtimes.apptainer", n): _RUNTIME for n in ("ApptainerRuntime", "ApptainerRuntimeInfo")},
    **{("verifiers.v1.runtimes.prime", n): _RUNTIME
       for n in ("BASE_LABELS", "EFFECTIVELY_UNBOUNDED_SECONDS", "PrimeProcess", "PrimeRuntime", "PrimeRuntimeInfo",
                 "set_base_sandbox_labels")},
    **{("verifiers.v1.runtimes.modal", n): _RUNTIME for n in ("ModalProcess", "ModalRuntime", "ModalRuntimeInfo")},
    **{("verifiers.v1.runtimes.e2b", n): _RUNTIME for n in ("E2BProcess", "E2BRuntime", "E2BRuntimeInfo")},
    **{("verifiers.v1.harnesses.bash.harness", n): "the original's bash harness prompt texts; ours words its own frame (SYSTEM_PROMPT, EDIT_PROMPT), and offers no web search"
       for n in ("BASH_SYSTEM_PROMPT", "EDIT_SYSTEM_PROMPT", "SEARCH_PROMPT")},
    **{("verifiers.v1.semantic", n): _ACP
       for n in ("ACP_EXTENSION_HEADERS", "ACP_MODEL_REQUEST_ID_HEADER", "ACP_REQUEST_ID_PATTERN", "EDGE_TYPE_PATTERN",
                 "extract_acp_info")},
    **{("verifiers.v1.utils.decorators", n): _DECORATORS for n in ("invoke", "invoke_all", "mark", "seed", "unseed")},
    **{("verifiers.v1.utils.generic", n): _PLUGINS for n in ("concrete_type", "merge_defaults")},
    ("verifiers.v1.harnesses.mini_swe_agent.harness", "PROGRAM_SOURCE"): "the original's launcher script source; ours drives mini's own CLI",
    **{("verifiers.v1.tasksets.harbor.taskset", n): "Harbor internals of the original (Docker images, its CLI's downloads, separate-verifier hooks) not used by ours"
       for n in ("Author", "CollectHook", "HARBOR_INSTALL_HINT", "HarborArtifact", "REWARD_JSON", "REWARD_JSON_ADAPTER",
                 "REWARD_SCALAR_ADAPTER", "VerifierConfig", "cache_dir", "dataset_dir", "download_command", "harbor_cli",
                 "make_tar", "parse_task", "parse_verifier_environment", "parse_verifier_extras", "resolve_env",
                 "resolve_image", "task_resources", "verifier_box_data")},
}

# the modules that exist here only as the original's paths (thin re-exports): every public name of
# theirs is checked; for the other modules, the names the original exports from ``verifiers.v1``
PATH_MODULES = {
    "verifiers.v1.agent", "verifiers.v1.semantic",
    *(f"verifiers.v1.configs.{m}" for m in ("agent", "env", "harness", "judge", "runtime", "select", "task", "taskset")),
    *(f"verifiers.v1.runtimes.{m}" for m in ("apptainer", "base", "docker", "e2b", "modal", "prime", "subprocess")),
    *(f"verifiers.v1.envs.{m}.env" for m in ("best_of_n", "isolated_verifier", "single_agent", "user_sim")),
    "verifiers.v1.harnesses.bash.harness", "verifiers.v1.harnesses.null.harness",
    "verifiers.v1.harnesses.mini_swe_agent.harness", "verifiers.v1.tasksets.harbor.taskset",
    *(f"verifiers.v1.utils.{m}" for m in ("aio", "artifacts", "decorators", "generic", "git", "paths", "score")),
}

# names every module may leave out: its logger and its type variables
PRIVATE = {"logger", "T", "F", "ConfigT", "RespT"}


def _module_reason(module: str) -> str | None:
    if module in MODULE_REASONS:
        return MODULE_REASONS[module]
    for prefix, reason in MODULE_REASONS.items():
        if prefix.endswith(".") and module.startswith(prefix):
            return reason
    return None


def _importable(module: str) -> bool:
    try:  # a module that is here only to refuse (its import raises ImportError) is not here
        importlib.import_module(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def original() -> dict:
    files = module_files(_install("0.4.0"))
    return {name: path for name, path in files.items() if name == "verifiers.v1" or name.startswith("verifiers.v1.")}


def test_every_original_module_path_imports_here_with_its_names_or_has_a_reason(original) -> None:
    assert {"verifiers.v1.configs.task", "verifiers.v1.runtimes.base", "verifiers.v1.utils.score"} <= set(original)
    problems, used_modules, used_names = [], set(), set()
    api = public_names("verifiers.v1", original)  # what the original itself calls public
    for module in sorted(original):
        reason = _module_reason(module)
        if reason is not None and module in MODULE_REASONS and _importable(module):
            problems.append(f"{module}: is here now; drop its reason")
            continue
        if reason is not None:
            used_modules.update(k for k in MODULE_REASONS if k == module or (k.endswith(".") and module.startswith(k)))
            continue
        try:
            ours = importlib.import_module(module)
        except ImportError as exc:
            problems.append(f"{module}: does not import here ({exc})")
            continue
        names = public_names(module, original)
        if module == "verifiers.v1":
            continue  # the package's own names: test_v1_surface.py
        if module not in PATH_MODULES:
            # a module that was always here: the public names it defines in the original, less those
            # the package-level surface test already gives a reason for
            names = (names & api) - set(API_REASONS)
        for name in sorted(names):
            if name.startswith("_") or name in PRIVATE:
                continue
            if (module, name) in NAME_REASONS:
                used_names.add((module, name))
                if hasattr(ours, name):
                    problems.append(f"{module}.{name}: is here now; drop its reason")
                continue
            if not hasattr(ours, name):
                problems.append(f"{module}.{name}: missing")
    assert not problems, "\n".join(problems)
    assert not (set(NAME_REASONS) - used_names), f"stale name reasons: {sorted(set(NAME_REASONS) - used_names)}"
    stale = [k for k in MODULE_REASONS if k not in used_modules]
    assert not stale, f"reasons for module paths the original does not have or that are here now: {stale}"


def test_a_path_module_gives_the_same_objects_as_their_home() -> None:
    import verifiers.v1 as vf
    from verifiers.v1.configs.task import TaskConfig
    from verifiers.v1.envs.best_of_n import BestOfNEnv as home
    from verifiers.v1.envs.best_of_n.env import BestOfNEnv
    from verifiers.v1.runtimes.base import ProgramResult, Runtime

    assert TaskConfig is vf.TaskConfig and BestOfNEnv is home
    assert Runtime is vf.Runtime and ProgramResult is importlib.import_module("verifiers.v1.runtimes").ProgramResult
