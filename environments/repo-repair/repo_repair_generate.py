"""Build repo-repair's task data (a maintainer's tool; the data it writes is committed).

    python repo_repair_generate.py fetch   # download the pinned sdists from PyPI (sha256-checked), trim them
    python repo_repair_generate.py build   # plant bugs, keep the ones the package's tests catch: tasks.jsonl

``fetch`` is the only step that uses the network. ``build`` is deterministic for a seed: it runs
offline from the committed archives, each test run in the bubblewrap sandbox (the sandbox runtime
of ``verifiers.v1``), since a mutated package is code nobody has read.

How a task is made, per package (SWE-smith's procedural recipe):
1. Run the pristine package's tests: the ones that pass are the scored set.
2. List every mutation of the library's functions (below), in a seeded order that alternates
   between operators.
3. For each: apply it and run the whole suite. Keep it when it ends in time, nothing fails to
   collect and at least one test of the scored set fails (those are ``fail_to_pass``), and a second
   run fails the same tests (no flaky bugs); then run the agent's copy (those tests removed) on the
   bug and keep it only when that copy passes. At most one
   bug per function; ``--per-package`` bugs per package.
4. The problem statement is written from the failing tests' error lines.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import difflib
import hashlib
import io
import json
import random
import re
import sys
import tarfile
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import repo_repair as rr

HERE = Path(__file__).resolve().parent
SEED = 20261206
PER_PACKAGE = 9
MAX_ATTEMPTS = 45
INDEX = "https://pypi.org/pypi"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    sha256: str
    module: str
    """The import name whose files are the library's sources."""
    license: str
    metadata: bool = False
    """Keep the sdist's ``*.egg-info`` (the package's tests read its installed metadata)."""


PINS = (
    Pin("inflection", "0.5.1", "1a29730d366e996aaacffb2f1f1cb9593dc38e2ddd30c91250c6dde09ea9b417", "inflection", "MIT"),
    Pin("parse", "1.22.4", "706d458feed5a81b02768d3156e8070baf6cee7d150a3a3c0cd43101a875c3b5", "parse", "MIT"),
    Pin("schema", "0.7.8", "e86cc08edd6fe6e2522648f4e47e3a31920a76e82cce8937535422e310862ab5", "schema", "MIT"),
    Pin("cachetools", "8.0.2", "30ac523adfc118b51d2b2e7bad8a0ddb31370dfe2700c7f10ca224f36ccf81e0", "cachetools", "MIT"),
    Pin("webcolors", "25.10.0", "62abae86504f66d0f6364c2a8520de4a0c47b80c03fc3a5f1815fedbef7c19bf", "webcolors", "BSD-3-Clause"),
    Pin("semver", "3.2.0", "adf2c822d2d8908a1dce0121da7da6511851fbd33080e61da8d2ba1e0677e8f3", "semver", "BSD-3-Clause"),
    Pin("toolz", "1.2.0", "9667a038e9d6ecba37995e26cb2f59ec6420b6ad8dd9677de59db9b956b08490", "toolz", "BSD-3-Clause", metadata=True),
    Pin("isodate", "0.7.2", "4cd1aa0f43ca76f4a6c6c0292a85f40b35ec2e43e315b59f06e6d32171a953e6", "isodate", "BSD-3-Clause"),
)

# Parts of an sdist the task's repository leaves out: built metadata, docs, CI and lock files.
DROP = re.compile(r"(^|/)(docs?|\.github|changelog\.d|benchmarks|examples)/|\.egg-info/|^PKG-INFO$|\.lock$|^uv\.lock$")
MAX_FILE = 256 * 1024


# --- fetch -----------------------------------------------------------------------------------------


def download(pin: Pin, cache: Path) -> bytes:
    """The pinned sdist, from the cache or PyPI; its sha256 must be the pinned one."""
    path = cache / f"{pin.name}-{pin.version}.tar.gz"
    if not path.is_file():
        meta_url = f"{INDEX}/{pin.name}/{pin.version}/json"
        with urllib.request.urlopen(meta_url, timeout=60) as r:
            meta = json.load(r)
        (sdist,) = [u for u in meta["urls"] if u["packagetype"] == "sdist"]
        with urllib.request.urlopen(urllib.parse.urljoin(meta_url, sdist["url"]), timeout=120) as r:
            raw = r.read()
        cache.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    if digest != pin.sha256:
        raise SystemExit(f"{pin.name} {pin.version}: sha256 {digest} is not the pinned {pin.sha256}")
    return raw


def trim(raw: bytes, *, metadata: bool = False) -> dict[str, bytes]:
    """The sdist's files that make the repository: the top folder stripped, docs and metadata left out
    (``metadata``: the ``*.egg-info`` folder kept, as an editable install would have it)."""
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:gz") as tar:
        for m in tar.getmembers():
            if not m.isfile() or "/" not in m.name:
                continue
            rel = m.name.split("/", 1)[1]
            if (DROP.search(rel) and not (metadata and ".egg-info/" in rel)) or m.size > MAX_FILE:
                continue
            data = tar.extractfile(m).read()  # type: ignore[union-attr]
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue  # binary files: none of these packages' tests need one
            out[rel] = data
    return out


def write_archive(files: Mapping[str, bytes]) -> bytes:
    """A reproducible tar.gz: sorted names, fixed owner, mode and time, no gzip timestamp."""
    buf = io.BytesIO()
    import gzip

    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=9) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:  # fmt: skip
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(files[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def package_facts(pin: Pin, files: Mapping[str, bytes]) -> dict[str, Any]:
    src = "src" if any(p.startswith("src/") for p in files) else "."
    prefix = "" if src == "." else "src/"
    sources = sorted(
        p for p in files
        if p.endswith(".py") and p.startswith(prefix)
        and (p[len(prefix):].split("/")[0] in (pin.module, f"{pin.module}.py"))
        and not rr._is_test_file(p[len(prefix):])
    )  # fmt: skip
    if not sources:
        raise SystemExit(f"{pin.name}: no library sources found under {src}/{pin.module}")
    return {"name": pin.name, "version": pin.version, "license": pin.license, "archive": f"packages/{pin.name}-{pin.version}.tar.gz",
            "sdist_sha256": pin.sha256, "src": src, "sources": sources, "tests": []}  # fmt: skip


def fetch(out: Path, cache: Path) -> None:
    (out / "packages").mkdir(parents=True, exist_ok=True)
    (out / "licenses").mkdir(parents=True, exist_ok=True)
    facts = []
    for pin in PINS:
        files = trim(download(pin, cache), metadata=pin.metadata)
        (out / "packages" / f"{pin.name}-{pin.version}.tar.gz").write_bytes(write_archive(files))
        licences = [p for p in files if re.match(r"(LICEN[CS]E|COPYING)", p.split("/")[-1], re.IGNORECASE)]
        if not licences:
            raise SystemExit(f"{pin.name}: the sdist has no licence file; it cannot be redistributed here")
        (out / "licenses" / f"{pin.name}-{pin.version}.txt").write_bytes(files[licences[0]])
        facts.append(package_facts(pin, files))
        print(f"{pin.name} {pin.version}: {len(files)} files, licence {pin.license} ({licences[0]})")
    (out / "packages.json").write_text(json.dumps(facts, indent=1) + "\n")


# --- mutations -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutation:
    operator: str
    file: str
    function: str
    line: int
    edits: tuple[tuple[int, int, bytes], ...]
    """(start, end, replacement) byte spans of the file, not overlapping."""

    def apply(self, source: bytes) -> bytes:
        out = source
        for start, end, new in sorted(self.edits, reverse=True):
            out = out[:start] + new + out[end:]
        return out


_COMPARE_FLIP = {
    ast.Lt: (r"<(?!=)", ">="), ast.LtE: (r"<=", ">"), ast.Gt: (r">(?!=)", "<="), ast.GtE: (r">=", "<"),
    ast.Eq: (r"==", "!="), ast.NotEq: (r"!=", "=="), ast.Is: (r"\bis\b(?!\s+not\b)", "is not"),
    ast.IsNot: (r"\bis\s+not\b", "is"), ast.In: (r"(?<!not )\bin\b", "not in"), ast.NotIn: (r"\bnot\s+in\b", "in"),
}  # fmt: skip
_ARITH_SWAP = {
    ast.Add: (r"\+", "-"), ast.Sub: (r"-", "+"), ast.Mult: (r"(?<!\*)\*(?!\*)", "//"),
    ast.FloorDiv: (r"//", "*"), ast.Mod: (r"%", "//"),
}  # fmt: skip
_BOOL_SWAP = {ast.And: (r"\band\b", "or"), ast.Or: (r"\bor\b", "and")}
_SKIP_BLOCKS = re.compile(r"TYPE_CHECKING|__name__")


class _Source:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.starts = [0]
        for line in data.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))
        self.lines = data.splitlines(keepends=True)

    def off(self, line: int, col: int) -> int:
        return self.starts[line - 1] + col

    def span(self, node: ast.AST) -> tuple[int, int]:
        return self.off(node.lineno, node.col_offset), self.off(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined, arg-type]

    def text(self, a: int, b: int) -> str:
        return self.data[a:b].decode()


def _token_edit(src: _Source, a: int, b: int, pattern: str, new: str) -> tuple[int, int, bytes] | None:
    """Replace the one match of ``pattern`` between two operands (nothing else may look like it)."""
    gap = src.text(a, b)
    if "#" in gap or "\\" in gap:
        return None
    found = list(re.finditer(pattern, gap))
    if len(found) != 1:
        return None
    m = found[0]
    return a + len(gap[: m.start()].encode()), a + len(gap[: m.end()].encode()), new.encode()


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    """Every node inside a function, with the function's qualified name (skipping type-checking
    and ``__main__`` blocks)."""

    def visit(node: ast.AST, scope: str, fn: str | None) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _SKIP_BLOCKS.search(ast.unparse(child.test)):
                continue
            if isinstance(child, ast.ClassDef):
                yield from visit(child, f"{scope}{child.name}.", fn)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield from visit(child, f"{scope}{child.name}.", f"{scope}{child.name}")
            else:
                if fn is not None:
                    yield fn, child
                yield from visit(child, scope, fn)

    yield from visit(tree, "", None)


def mutations(path: str, data: bytes) -> list[Mutation]:
    """Every mutation of ``path``'s functions that still parses and changes the program."""
    src = _Source(data)
    try:
        tree = rr.quiet_parse(data)
    except SyntaxError:
        return []
    found: list[Mutation] = []

    def add(op: str, fn: str, node: ast.AST, *edits: tuple[int, int, bytes] | None) -> None:
        if not edits or any(e is None for e in edits):
            return
        found.append(Mutation(op, path, fn, node.lineno, tuple(e for e in edits if e is not None)))  # type: ignore[attr-defined]

    for fn, node in _functions(tree):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE_FLIP:
            pattern, new = _COMPARE_FLIP[type(node.ops[0])]
            add("flip_comparison", fn, node, _token_edit(src, src.span(node.left)[1], src.span(node.comparators[0])[0], pattern, new))
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            pattern, new = _BOOL_SWAP[type(node.op)]
            add("swap_boolean_operator", fn, node, _token_edit(src, src.span(node.values[0])[1], src.span(node.values[1])[0], pattern, new))
        elif isinstance(node, ast.BinOp) and type(node.op) in _ARITH_SWAP:
            if any((isinstance(x, ast.Constant) and isinstance(x.value, str)) or isinstance(x, ast.JoinedStr) for x in (node.left, node.right)):
                continue  # string building, not arithmetic
            pattern, new = _ARITH_SWAP[type(node.op)]
            add("change_arithmetic", fn, node, _token_edit(src, src.span(node.left)[1], src.span(node.right)[0], pattern, new))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
            a, b = src.span(node.args[0]), src.span(node.args[1])
            if src.data[a[0]:a[1]] != src.data[b[0]:b[1]]:
                add("swap_arguments", fn, node, (a[0], a[1], src.data[b[0]:b[1]]), (b[0], b[1], src.data[a[0]:a[1]]))
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, bool):
            a, b = src.span(node.value)
            add("flip_return_bool", fn, node, (a, b, str(not node.value.value).encode()))
        if isinstance(node, ast.Subscript | ast.Compare | ast.BinOp) or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range"):
            for const in _int_constants(node):
                a, b = src.span(const)
                delta = 1 if (const.value == 0 or (const.lineno + const.col_offset) % 2) else -1
                add("off_by_one", fn, const, (a, b, str(const.value + delta).encode()))
        if isinstance(node, ast.If | ast.While):
            test = node.test
            a, b = src.span(test)
            if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
                o = src.span(test.operand)
                inner = src.data[o[0]:o[1]]
                add("negate_condition", fn, node, (a, b, inner))
            elif isinstance(test, ast.Name | ast.Attribute | ast.Call):
                add("negate_condition", fn, node, (a, b, b"not " + src.data[a:b]))
        if isinstance(node, ast.If) and node.orelse and isinstance(node, ast.If):
            add("drop_else", fn, node, _drop_else(src, node))
        if isinstance(node, ast.If) and not node.orelse:
            add("drop_if", fn, node, _drop_lines(src, node))
    out = []
    seen: set[bytes] = set()
    # whether the program changed, by comparing only the top-level statement holding the edit (the
    # others keep their text, so their trees too): the same verdict as comparing whole modules
    # (and only that statement is parsed again: a top-level statement starts at column 0 on its own line)
    spans = [(src.starts[stmt.lineno - 1], src.starts[stmt.end_lineno or stmt.lineno]) for stmt in tree.body]
    dumps: dict[int, str] = {}
    for m in found:
        new = m.apply(data)
        if new in seen:
            continue
        at = min(e[0] for e in m.edits)
        i = next((k for k, (_, end) in enumerate(spans) if at < end), len(spans) - 1)
        start, end = spans[i]
        piece = new[start:end + len(new) - len(data)]
        try:
            parsed = rr.quiet_parse(piece)
        except SyntaxError:
            continue
        if i not in dumps:
            dumps[i] = ast.dump(tree.body[i])
        if len(parsed.body) != 1 or ast.dump(parsed.body[0]) != dumps[i]:
            seen.add(new)
            out.append(m)
    return out


def _int_constants(node: ast.AST) -> list[ast.Constant]:
    if isinstance(node, ast.Subscript):
        parts = [node.slice] if not isinstance(node.slice, ast.Slice) else [x for x in (node.slice.lower, node.slice.upper) if x]
    elif isinstance(node, ast.Compare):
        parts = [node.left, *node.comparators]
    elif isinstance(node, ast.BinOp):
        parts = [node.left, node.right]
    else:
        parts = list(node.args)  # type: ignore[attr-defined]
    return [p for p in parts if isinstance(p, ast.Constant) and type(p.value) is int and 0 <= p.value <= 1000]


def _whole_lines(src: _Source, first: int, last: int) -> bool:
    return 1 <= first <= last <= len(src.lines)


def _drop_lines(src: _Source, node: ast.If) -> tuple[int, int, bytes] | None:
    """Remove an ``if`` block (a statement alone on its lines); ``pass`` where it was all its block had."""
    first, last = node.lineno, node.end_lineno or node.lineno
    line = src.lines[first - 1].decode()
    if line[: node.col_offset].strip() or src.lines[last - 1].decode()[node.end_col_offset:].strip():  # type: ignore[index]
        return None
    return src.starts[first - 1], src.starts[last], f"{line[: node.col_offset]}pass\n".encode()


def _drop_else(src: _Source, node: ast.If) -> tuple[int, int, bytes] | None:
    """Remove the ``else:`` branch (never an ``elif``) of an ``if``."""
    body_end = node.body[-1].end_lineno or node.body[-1].lineno
    for n in range(body_end + 1, node.orelse[0].lineno + 1):
        text = src.lines[n - 1].decode().strip()
        if re.match(r"else\s*:", text):
            last = node.orelse[-1].end_lineno or node.orelse[-1].lineno
            if src.lines[last - 1].decode()[node.orelse[-1].end_col_offset:].strip():  # type: ignore[index]
                return None
            return src.starts[n - 1], src.starts[last], b""
        if text and not text.startswith("#"):
            return None  # an elif
    return None


def unified_diff(path: str, old: bytes, new: bytes) -> str:
    return "".join(difflib.unified_diff(old.decode().splitlines(keepends=True), new.decode().splitlines(keepends=True),
                                        f"a/{path}", f"b/{path}", n=3))  # fmt: skip


def ordered(candidates: list[Mutation], rng: random.Random) -> list[Mutation]:
    """Candidates in a seeded order that takes the operators in turn (so one kind does not crowd out the rest)."""
    by_op: dict[str, list[Mutation]] = {}
    for m in candidates:
        by_op.setdefault(m.operator, []).append(m)
    ops = sorted(by_op)
    rng.shuffle(ops)
    for op in ops:
        rng.shuffle(by_op[op])
    out: list[Mutation] = []
    while any(by_op.values()):
        for op in ops:
            if by_op[op]:
                out.append(by_op[op].pop())
    return out


# --- build -----------------------------------------------------------------------------------------


def statement(pkg: rr.Package, result: rr.SuiteResult, failing: list[str]) -> str:
    n = len(failing)
    parts = [f"The test suite of {pkg.name} {pkg.version} fails: "
             + (f"{n} tests that passed before now fail." if n > 1 else "a test that passed before now fails."), ""]
    shown = failing[:3]
    for node in shown:
        parts.append(node)
        lines = result.messages.get(node) or [result.outcomes.get(node, "failed")]
        parts += [f"    {line}" for line in lines[:6]]
        parts.append("")
    if n > len(shown):
        parts += [f"(and {n - len(shown)} more)", ""]
    parts.append(
        "Find the cause in the library's source code and fix it. The failing tests are not in your copy of the "
        "repository (the tests that are there pass); do not edit the tests. Run the test suite with "
        "`python3 .vf/pytest -q` from the repository root."
    )
    return "\n".join(parts)


async def _sandbox() -> Any:
    from verifiers.v1.runtimes import SandboxConfig, SandboxRuntime

    runtime = SandboxRuntime(SandboxConfig(limits={"memory_mb": 2048, "processes": 256}, timeout=300))
    await runtime.start()
    return runtime


async def try_mutation(pkg: rr.Package, files: Mapping[str, bytes], m: Mutation, scored: set[str], timeout: float) -> dict[str, Any] | None:
    """The task ``m`` makes, or None when the package's tests do not catch it cleanly."""
    buggy = dict(files)
    buggy[m.file] = m.apply(files[m.file])
    runtime = await _sandbox()
    try:
        result = await rr.run_suite(runtime, pkg, buggy, timeout=timeout)
        if result.timed_out or result.collect_errors or not result.outcomes:
            return None
        failing = sorted(t for t in scored if not result.passed(t))
        if not failing:
            return None
        # a bug whose failures vary from run to run (code that draws random numbers) is no task
        again = await rr.run_suite(runtime, pkg, buggy, timeout=timeout)
        if again.timed_out or sorted(t for t in scored if not again.passed(t)) != failing:
            return None
        visible = dict(buggy)
        for path, data in rr.hidden_test_files(buggy, failing).items():
            if data is None:
                visible.pop(path)
            else:
                visible[path] = data
        seen = await rr.run_suite(runtime, pkg, visible, timeout=timeout)
        if seen.timed_out or seen.collect_errors or seen.failing or not seen.outcomes:
            return None
    finally:
        await runtime.stop()
    patch = unified_diff(m.file, files[m.file], buggy[m.file])
    if rr.apply_patch(files[m.file].decode(), patch) != buggy[m.file].decode():
        return None
    return {
        "id": f"{pkg.name}.{m.operator}.{hashlib.sha256(patch.encode()).hexdigest()[:8]}",
        "package": pkg.name, "version": pkg.version, "file": m.file, "function": m.function, "line": m.line,
        "operator": m.operator, "patch": patch, "fail_to_pass": failing, "problem_statement": statement(pkg, result, failing),
    }  # fmt: skip


async def build_package(pkg: rr.Package, files: Mapping[str, bytes], *, seed: int, per_package: int,
                        max_attempts: int, timeout: float, parallel: int = 2, log: Callable[[str], None] = print) -> tuple[list[str], list[dict[str, Any]]]:  # fmt: skip
    """The package's scored tests and its tasks."""
    runtime = await _sandbox()
    try:
        pristine = await rr.run_suite(runtime, pkg, files, timeout=timeout)
    finally:
        await runtime.stop()
    if pristine.timed_out or pristine.collect_errors or pristine.failing:
        raise SystemExit(f"{pkg.name}: the pristine tests do not pass: {pristine.failing[:5]} {pristine.collect_errors[:5]} {pristine.output[-2000:]}")
    scored = sorted(t for t, o in pristine.outcomes.items() if o == "passed")
    candidates = [m for path in pkg.sources for m in mutations(path, files[path])]
    order = ordered(candidates, random.Random(f"{seed}:{pkg.name}"))
    tasks: list[dict[str, Any]] = []
    used: set[tuple[str, str]] = set()
    attempts = 0
    queue = list(order)
    while queue and len(tasks) < per_package and attempts < max_attempts:
        # the next few eligible candidates run side by side; their verdicts are then taken in
        # order, exactly as one at a time would (a later one whose function got a bug is dropped)
        batch: list[Mutation] = []
        while queue and len(batch) < min(parallel, max_attempts - attempts):
            m = queue.pop(0)
            if (m.file, m.function) not in used and all((m.file, m.function) != (b.file, b.function) for b in batch):
                batch.append(m)
        verdicts = await asyncio.gather(*(try_mutation(pkg, files, m, set(scored), timeout) for m in batch))
        for m, task in zip(batch, verdicts, strict=True):
            if len(tasks) >= per_package:
                break
            attempts += 1
            log(f"{pkg.name}: {m.operator} {m.file}:{m.line} ({m.function}) -> "
                + (f"kept, {len(task['fail_to_pass'])} failing" if task else "dropped"))
            if task is not None:
                used.add((m.file, m.function))
                tasks.append(task)
    return scored, tasks


def build(out: Path, *, seed: int, per_package: int, max_attempts: int, only: list[str] | None, timeout: float) -> None:
    facts = json.loads((out / "packages.json").read_text())
    done: dict[str, list[dict[str, Any]]] = {}  # with --only, the other packages' tasks stay as they are
    if only and (out / "tasks.jsonl").is_file():
        for line in (out / "tasks.jsonl").read_text().splitlines():
            rec = json.loads(line)
            done.setdefault(rec["package"], []).append(rec)
    for fact in facts:
        if only and fact["name"] not in only:
            continue
        done.pop(fact["name"], None)
        pkg = rr.Package(**{**fact, "sources": tuple(fact["sources"]), "tests": ()})
        files = rr.read_archive((out / fact["archive"]).read_bytes())
        scored, tasks = asyncio.run(build_package(pkg, files, seed=seed, per_package=per_package,
                                                  max_attempts=max_attempts, timeout=timeout))  # fmt: skip
        fact["tests"] = scored
        done[fact["name"]] = tasks
        print(f"== {pkg.name}: {len(tasks)} tasks, {len(scored)} scored tests")
        _write(out, facts, done)  # after each package: a long build keeps what it finished


def _write(out: Path, facts: list[dict[str, Any]], done: Mapping[str, list[dict[str, Any]]]) -> None:
    (out / "packages.json").write_text(json.dumps(facts, indent=1) + "\n")
    records = [rec for fact in facts for rec in done.get(fact["name"], [])]
    with (out / "tasks.jsonl").open("w") as f:
        for rec in records:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    print(f"{len(records)} tasks written to {out / 'tasks.jsonl'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=["fetch", "build"])
    parser.add_argument("--out", type=Path, default=rr.DATA)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "repo-repair" / "sdists")
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--per-package", type=int, default=PER_PACKAGE)
    parser.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS)
    parser.add_argument("--only", nargs="*", help="build these packages only")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one test-suite run may take")
    args = parser.parse_args(argv)
    if args.step == "fetch":
        fetch(args.out, args.cache)
    else:
        build(args.out, seed=args.seed, per_package=args.per_package, max_attempts=args.max_attempts,
              only=args.only, timeout=args.timeout)  # fmt: skip


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
