"""repo-repair: fix a bug planted in a real open-source Python package; its own hidden tests decide.

A v1 taskset (``import verifiers.v1 as vf``) in the style of SWE-smith and R2E-Gym, offline. Each
task is one small pure-Python package from the package index (its sdist, shipped trimmed in
``repo_repair_data/packages/``), with one bug injected by an AST mutation (a flipped comparison,
an off-by-one, swapped arguments, a dropped branch ...). ``repo_repair_generate.py`` built the tasks from a
seed and kept only the bugs that the package's own tests catch and that pass again when reverted.

The agent gets the repository (the bug applied, the failing tests removed from its copy) and a
problem statement written from the failing tests' output. Scoring copies the agent's version of
the library's source files into a fresh copy of the pristine repository, every test included, and
runs the package's test suite in the rollout's runtime (``type = "sandbox"``: bubblewrap). pytest
comes from this interpreter's installation, zipped into the work folder (nothing is fetched).
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import io
import json
import posixpath
import py_compile
import re
import shlex
import tarfile
import tempfile
import uuid
import warnings
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import Field

import verifiers.v1 as vf

DATA = Path(__file__).resolve().parent / "repo_repair_data"
TOOLS = ".vf"
"""The folder of the work tree holding the bundled pytest and the test runner (not the package's)."""
RUNNER = f"{TOOLS}/pytest"
RESULTS = f"{TOOLS}/results.json"
PYTEST_DISTS = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py")
MAX_SOURCE_BYTES = 1024 * 1024
"""Largest library file read back from the agent's work folder for scoring."""

SYSTEM_PROMPT = (
    "You are a software engineer fixing a bug in a Python repository. Work in the repository with "
    "your tools: read the code, reproduce the problem, change the library's source (not its tests) and "
    "check your fix by running the test suite. Keep the change minimal."
)

# The test runner written beside the bundled pytest: the agent's way to run the tests, and the
# scorer's (with VF_RESULTS set, a plugin records each test's outcome as JSON). {src} is the folder
# the package imports from, relative to the repository root.
RUNNER_SOURCE = '''\
"""Run this repository's tests with the bundled pytest: python3 .vf/pytest [pytest arguments]."""
import json
import os
import re
import sys

if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    # a fixed hash seed: tests parametrized over a set get the same ids (and order) in every run
    os.execve(sys.executable, [sys.executable, *sys.argv], {{**os.environ, "PYTHONHASHSEED": "0"}})
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [os.path.join(HERE, "pytest.zip"), os.path.normpath(os.path.join(ROOT, {src!r}))]
sys.dont_write_bytecode = True
import pytest  # noqa: E402


class Results:
    """Each test's outcome (passed, failed, error, skipped, xfailed, xpassed) and its error lines."""

    def __init__(self):
        self.outcomes, self.messages, self.collect_errors = {{}}, {{}}, []

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(report.nodeid)
            self.messages[report.nodeid] = self._lines(report)

    def pytest_runtest_logreport(self, report):
        if self.outcomes.get(report.nodeid) in ("failed", "error"):
            return  # the first failure of a test stands (a subtest's, a teardown's)
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
            self.messages[report.nodeid] = self._lines(report)
        elif report.when == "call" or (report.skipped and report.when == "setup"):
            outcome = report.outcome
        else:
            return
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
        self.outcomes[report.nodeid] = outcome

    @staticmethod
    def _lines(report):
        lines = [line[1:].strip() for line in report.longreprtext.splitlines() if line.startswith("E ")]
        return [re.sub(r"0x[0-9a-fA-F]+", "0x...", line) for line in lines if line][:12]

    def write(self, path, status):
        with open(path, "w") as f:
            json.dump({{"status": int(status), "outcomes": self.outcomes, "messages": self.messages,
                       "collect_errors": self.collect_errors}}, f)


if __name__ == "__main__":
    os.chdir(ROOT)
    args = ["-o", "addopts=", "-p", "no:cacheprovider", "-p", "no:randomly", *sys.argv[1:]]
    out = os.environ.get("VF_RESULTS")
    results = Results() if out else None
    status = pytest.main(args, plugins=[results] if results else [])
    if results:
        results.write(out, status)
    sys.exit(status)
'''


# --- the bundled data ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Package:
    """One package of ``repo_repair_data/packages.json``: where it came from and what its tests are."""

    name: str
    version: str
    license: str
    archive: str
    """The trimmed source tree, ``packages/<name>-<version>.tar.gz`` (files relative to the repo root)."""
    sdist_sha256: str
    src: str
    """The folder the package imports from, relative to the repository root (``.`` or ``src``)."""
    sources: tuple[str, ...]
    """The library's own ``.py`` files (scoring takes these from the agent's work folder)."""
    tests: tuple[str, ...]
    """The node ids of the tests that pass on the pristine package (the scored set)."""

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


@lru_cache(maxsize=1)
def packages() -> dict[str, Package]:
    data = json.loads((DATA / "packages.json").read_text())
    return {p["name"]: Package(**{**p, "sources": tuple(p["sources"]), "tests": tuple(p["tests"])}) for p in data}


@lru_cache(maxsize=16)
def package_files(name: str) -> Mapping[str, bytes]:
    """The pristine repository of package ``name``: path -> bytes."""
    pkg = packages()[name]
    return read_archive((DATA / pkg.archive).read_bytes())


def read_archive(raw: bytes) -> dict[str, bytes]:
    """The regular files of a trimmed source archive (written by ``repo_repair_generate.py``, shipped here)."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            name = posixpath.normpath(member.name)
            if name.startswith(("/", "../")) or name == "..":
                raise ValueError(f"archive member {member.name!r} escapes the repository")
            f = tar.extractfile(member)
            assert f is not None
            out[name] = f.read()
    return out


def load_records() -> list[dict[str, Any]]:
    with (DATA / "tasks.jsonl").open() as f:
        return [json.loads(line) for line in f if line.strip()]


# --- patches ---------------------------------------------------------------------------------------

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class PatchError(ValueError):
    """A patch that does not apply to the file it names."""


def patched_path(patch: str) -> str:
    """The one file a unified diff changes (``a/<path>`` / ``b/<path>``)."""
    for line in patch.splitlines():
        if line.startswith("+++ "):
            target = line[4:].split("\t")[0].strip()
            return target[2:] if target.startswith("b/") else target
    raise PatchError("the patch names no file")


def apply_patch(text: str, patch: str, *, reverse: bool = False) -> str:
    """``text`` with a one-file unified diff applied (``reverse``: undone). Every context and removed
    line must match exactly; anything else is a :class:`PatchError`, never a fuzzy apply."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0
    body = patch.splitlines(keepends=True)
    i = 0
    while i < len(body):
        m = _HUNK.match(body[i])
        i += 1
        if m is None:
            continue
        start = int(m.group(3) if reverse else m.group(1))
        start = start - 1 if start > 0 else 0
        if start < pos or start > len(lines):
            raise PatchError(f"hunk at line {start + 1} is out of order or past the end")
        out.extend(lines[pos:start])
        pos = start
        while i < len(body) and not body[i].startswith("@@"):
            line = body[i]
            i += 1
            if line.startswith("\\"):  # "\ No newline at end of file": the previous line has none
                if out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                continue
            tag, content = line[:1], line[1:]
            old, new = ("+", "-") if reverse else ("-", "+")
            if tag in (" ", old):
                if pos >= len(lines) or lines[pos].rstrip("\n") != content.rstrip("\n"):
                    raise PatchError(f"line {pos + 1} does not match the patch")
                if tag == " ":
                    out.append(lines[pos])
                pos += 1
            elif tag == new:
                out.append(content)
    out.extend(lines[pos:])
    return "".join(out)


# --- the agent's copy of the tests -----------------------------------------------------------------


def hidden_test_files(files: Mapping[str, bytes], node_ids: list[str]) -> dict[str, bytes | None]:
    """The test files of the agent's copy with the tests ``node_ids`` name removed: path -> new
    bytes (None: the whole file removed, when a test cannot be found in it). A method inherited from
    a base class is removed where it is defined (the tests that inherit it are hidden too)."""
    wanted: dict[str, set[tuple[str, ...]]] = {}
    for node in node_ids:
        path, *names = node.split("::")
        names = [re.sub(r"\[.*\]$", "", n) for n in names]
        wanted.setdefault(path, set()).add(tuple(names))
    # what to cut, per file: (first line, last line) of each definition (decorators included)
    cuts: dict[str, set[tuple[int, int]]] = {}
    gone: set[str] = set()
    trees: dict[str, ast.Module] = {}

    def tree(path: str) -> ast.Module | None:
        if path not in trees:
            try:
                trees[path] = _parsed_test_file(files[path])
            except (KeyError, SyntaxError, ValueError):
                return None
        return trees[path]

    by_name: dict[str, dict[str, set[tuple[int, int]]]] | None = None  # function name -> file -> spans

    def named(name: str) -> dict[str, set[tuple[int, int]]]:
        nonlocal by_name
        if by_name is None:  # every test file walked once, on the first inherited test
            by_name = {}
            for p in sorted(files):
                if p.endswith(".py") and _is_test_file(p) and (t := tree(p)) is not None:
                    for n in ast.walk(t):
                        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                            by_name.setdefault(n.name, {}).setdefault(p, set()).add(_span(n))
        return by_name.get(name, {})

    for path, chains in sorted(wanted.items()):
        mod = tree(path)
        if mod is None:
            gone.add(path)
            continue
        for chain in sorted(chains):
            spans = _definition_spans(mod, chain)
            if not spans:  # inherited: cut every test of that name in the test files
                elsewhere = named(chain[-1])
                if not elsewhere:
                    gone.add(path)
                for p, found in elsewhere.items():
                    cuts.setdefault(p, set()).update(found)
                continue
            cuts.setdefault(path, set()).update(spans)
    out: dict[str, bytes | None] = {p: None for p in gone}
    for path, spans in cuts.items():
        if path not in gone:
            out[path] = _cut(files[path].decode(), spans).encode()
    return out


def quiet_parse(source: bytes | str) -> ast.Module:
    """``ast.parse`` without the warnings of the package's own code (invalid escapes in old tests)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source)


@lru_cache(maxsize=256)
def _parsed_test_file(source: bytes) -> ast.Module:
    """A test file's tree, parsed once per process (the same pristine test files serve every task of
    a package; the trees are only read)."""
    return quiet_parse(source)


def _is_test_file(path: str) -> bool:
    base = posixpath.basename(path)
    return base.startswith("test") or "/tests/" in f"/{path}" or "/test/" in f"/{path}"


def _span(node: ast.AST) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first, node.end_lineno or node.lineno


def _definition_spans(mod: ast.Module, chain: tuple[str, ...]) -> set[tuple[int, int]]:
    body: list[ast.stmt] = mod.body
    for depth, name in enumerate(chain):
        last = depth == len(chain) - 1
        found = next((n for n in body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                      and n.name == name), None)  # fmt: skip
        if found is None:
            return set()
        if last:
            return {_span(found)}
        if not isinstance(found, ast.ClassDef):
            return set()
        body = found.body
    return set()


def _cut(text: str, spans: set[tuple[int, int]]) -> str:
    """``text`` without the given line spans; a class or block left empty gets a ``pass``."""
    lines = text.splitlines(keepends=True)
    for first, last in sorted(spans, reverse=True):
        indent = re.match(r"[ \t]*", lines[first - 1]).group(0)  # type: ignore[union-attr]
        del lines[first - 1:last]
        lines.insert(first - 1, f"{indent}pass\n")  # keeps every enclosing block non-empty
    return "".join(lines)


# --- the bundled pytest ----------------------------------------------------------------------------


@lru_cache(maxsize=1)
def pytest_zip() -> bytes:
    """pytest and its pure-Python dependencies, from this interpreter's installation, as one zip
    the sandbox's interpreter imports from (with unchecked-hash ``.pyc`` files beside the sources,
    so it does not compile pytest on every run; another Python version falls back to the sources)."""
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for dist in PYTEST_DISTS:
            spec = importlib.util.find_spec(dist)
            if spec is None or spec.origin is None:
                if dist == "py":
                    continue  # pytest's own shim module of the same name; older pytests lack it
                raise RuntimeError(f"repo-repair needs {dist} installed beside verifiers (pip install pytest)")
            origin = Path(spec.origin)
            root = origin.parent.parent if origin.name == "__init__.py" else origin.parent
            paths = sorted(origin.parent.rglob("*")) if origin.name == "__init__.py" else [origin]
            for path in paths:
                if "__pycache__" in path.parts or not path.is_file() or path.suffix not in (".py", ".typed", ".txt", ""):
                    continue
                rel = path.relative_to(root).as_posix()
                zf.writestr(_zip_info(rel), path.read_bytes())
                if path.suffix == ".py":
                    pyc = Path(tmp) / "c.pyc"
                    try:
                        py_compile.compile(str(path), cfile=str(pyc), doraise=True,
                                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)  # fmt: skip
                    except py_compile.PyCompileError:
                        continue
                    zf.writestr(_zip_info(rel + "c"), pyc.read_bytes())
    return buf.getvalue()


def _zip_info(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def runner_source(pkg: Package) -> str:
    return RUNNER_SOURCE.format(src=pkg.src)


# --- running the tests -----------------------------------------------------------------------------


@dataclass
class SuiteResult:
    """One run of a package's tests: each test's outcome, by node id."""

    outcomes: dict[str, str] = field(default_factory=dict)
    messages: dict[str, list[str]] = field(default_factory=dict)
    collect_errors: list[str] = field(default_factory=list)
    status: int | None = None
    timed_out: bool = False
    output: str = ""

    def passed(self, node: str) -> bool:
        return self.outcomes.get(node) == "passed"

    @property
    def failing(self) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o in ("failed", "error"))


async def run_suite(
    runtime: Any, pkg: Package, files: Mapping[str, bytes], *, paths: list[str] | None = None, timeout: float = 120.0,
) -> SuiteResult:  # fmt: skip
    """Write ``files`` (a whole repository) into a fresh folder of ``runtime``'s work folder, run its
    tests there (only ``paths``, test files, when given) and remove the folder. A run past
    ``timeout`` is killed and counts as every test failed."""
    folder = f".vf-run-{uuid.uuid4().hex[:12]}"
    tree = {f"{folder}/{p}": data for p, data in files.items()}
    tree[f"{folder}/{TOOLS}/pytest.zip"] = pytest_zip()
    tree[f"{folder}/{RUNNER}"] = runner_source(pkg).encode()
    for path, data in tree.items():
        await runtime.write(path, data)
    try:
        args = " ".join(shlex.quote(p) for p in (paths or []))
        command = (f"cd {shlex.quote(folder)} && VF_RESULTS={shlex.quote(RESULTS)} "
                   f"python3 {RUNNER} -q --tb=short {args} 2>&1 | tail -c 20000")  # fmt: skip
        result = await runtime.run(command, timeout=timeout)
        out = SuiteResult(output=result.stdout, timed_out=result.timed_out)
        if not result.timed_out:
            try:
                raw = json.loads(await runtime.read(f"{folder}/{RESULTS}", max_bytes=16 * 1024 * 1024))
            except (OSError, ValueError, vf.SandboxError) as exc:
                out.collect_errors = [f"no results: {exc}"]
            else:
                out.status = raw.get("status")
                out.outcomes = dict(raw.get("outcomes") or {})
                out.messages = dict(raw.get("messages") or {})
                out.collect_errors = list(raw.get("collect_errors") or [])
        return out
    finally:
        await runtime.run(f"rm -rf -- {shlex.quote(folder)}", timeout=60)


# --- the taskset -----------------------------------------------------------------------------------


class RepairData(vf.TaskData):
    package: str
    version: str
    file: str
    """The library file the bug is in."""
    operator: str
    """The mutation that planted the bug (``flip_comparison``, ``off_by_one`` ...)."""
    patch: str
    """The bug, as a unified diff of the pristine file (reversed, it is the reference fix)."""
    fail_to_pass: list[str]
    """The tests the bug breaks (hidden from the agent): all must pass again."""


class RepairTaskConfig(vf.TaskConfig):
    require_pass_to_pass: bool = True
    """``resolved`` also needs every other test of the package to pass (SWE-bench's rule)."""
    test_timeout: float = Field(120.0, gt=0)
    """Seconds the package's test suite may run when scoring (past it: nothing passed)."""


class RepairTask(vf.Task[RepairData, vf.State, RepairTaskConfig]):
    @property
    def key(self) -> str:
        return self.data.id or self.hash

    def package(self) -> Package:
        return packages()[self.data.package]

    def buggy_files(self) -> dict[str, bytes]:
        """The pristine repository with the bug applied (every test still in it)."""
        files = dict(package_files(self.data.package))
        files[self.data.file] = apply_patch(files[self.data.file].decode(), self.data.patch).encode()
        return files

    def workspace_files(self) -> dict[str, bytes]:
        """What the agent gets: the buggy repository without the failing tests."""
        files = self.buggy_files()
        for path, data in hidden_test_files(files, self.data.fail_to_pass).items():
            if data is None:
                files.pop(path, None)
            else:
                files[path] = data
        return files

    def pass_to_pass(self) -> list[str]:
        failing = set(self.data.fail_to_pass)
        return [t for t in self.package().tests if t not in failing]

    async def setup(self, trace: vf.Trace, runtime: Any) -> None:
        files = self.workspace_files()
        files[f"{TOOLS}/pytest.zip"] = pytest_zip()
        files[RUNNER] = runner_source(self.package()).encode()
        for path, data in files.items():
            await runtime.write(path, data)
        # a git repository, so the agent (and agent programs that submit `git diff`) sees its changes
        r = await runtime.run(
            f"git init -q && echo '{TOOLS}/' >> .git/info/exclude && git add -A && "
            "git -c user.name=repo-repair -c user.email=repo-repair@localhost -c commit.gpgsign=false "
            "commit -q -m 'the repository' && echo ok",
            timeout=60,
        )
        if "ok" not in r.stdout:
            raise RuntimeError(f"repo-repair: git could not set up the repository: {(r.stdout + r.stderr).strip()[-500:]}")

    async def grade(self, runtime: Any) -> SuiteResult:
        """The package's whole test suite on the agent's library files, in a fresh pristine copy."""
        pkg = self.package()
        files = dict(package_files(self.data.package))
        for path in pkg.sources:
            try:
                files[path] = await runtime.read(path, max_bytes=MAX_SOURCE_BYTES)
            except FileNotFoundError:
                files.pop(path, None)  # the agent deleted it: the tests see it gone
            except (OSError, vf.SandboxError) as exc:
                if "No such file" in str(exc) or "not found" in str(exc).lower():
                    files.pop(path, None)
                else:
                    raise
        return await run_suite(runtime, pkg, files, timeout=self.config.test_timeout)

    @vf.reward(weight=1.0)
    async def resolved(self, task: RepairData, trace: vf.Trace, runtime: Any) -> float:
        """1 when every failing test passes again (and, by default, every other test still passes)."""
        result = await self.grade(runtime)
        f2p = [t for t in task.fail_to_pass if result.passed(t)]
        p2p_all = self.pass_to_pass()
        p2p = [t for t in p2p_all if result.passed(t)]
        trace.record_metric("fail_to_pass", len(f2p) / len(task.fail_to_pass) if task.fail_to_pass else 0.0)
        trace.record_metric("pass_to_pass", len(p2p) / len(p2p_all) if p2p_all else 1.0)
        trace.record_metric("tests_timed_out", float(result.timed_out))
        ok = len(f2p) == len(task.fail_to_pass) and (len(p2p) == len(p2p_all) or not self.config.require_pass_to_pass)
        return float(ok and not result.timed_out)

    async def validate(self, runtime: Any) -> bool:
        """The reference fix (the bug's patch reversed), applied in the set-up work folder, resolves it."""
        text = (await runtime.read(self.data.file)).decode()
        await runtime.write(self.data.file, apply_patch(text, self.data.patch, reverse=True))
        result = await self.grade(runtime)
        return all(result.passed(t) for t in [*self.data.fail_to_pass, *self.pass_to_pass()])


class RepairConfig(vf.TasksetConfig):
    task: RepairTaskConfig = RepairTaskConfig()
    packages: list[str] | None = None
    """Only these packages' tasks (None: all)."""
    operators: list[str] | None = None
    """Only bugs made by these mutation operators (None: all)."""
    ids: list[str] | None = None
    """Only these tasks, by id (``parse.flip_comparison.1a2b3c4d``; None: all)."""


class RepoRepair(vf.Taskset[RepairTask, RepairConfig]):
    def load(self) -> Iterator[RepairTask]:
        cfg = self.config
        known = packages()
        for name in cfg.packages or []:
            if name not in known:
                raise ValueError(f"unknown package {name!r} (bundled: {', '.join(sorted(known))})")
        idx = 0
        for rec in load_records():
            if cfg.packages is not None and rec["package"] not in cfg.packages:
                continue
            if cfg.operators is not None and rec["operator"] not in cfg.operators:
                continue
            if cfg.ids is not None and rec["id"] not in cfg.ids:
                continue
            data = RepairData(
                idx=idx, id=rec["id"], name=rec["id"], prompt=rec["problem_statement"], system_prompt=SYSTEM_PROMPT,
                package=rec["package"], version=rec["version"], file=rec["file"], operator=rec["operator"],
                patch=rec["patch"], fail_to_pass=rec["fail_to_pass"],
            )  # fmt: skip
            idx += 1
            yield RepairTask(data, cfg.task)


async def gather_limited(coros: list[Any], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(c: Any) -> Any:
        async with gate:
            return await c

    return list(await asyncio.gather(*(one(c) for c in coros)))

__all__ = ["RepoRepair"]
