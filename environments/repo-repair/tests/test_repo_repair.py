"""repo-repair without a sandbox: the committed data is whole, compact and licensed; every bug's patch
applies and reverses exactly; the agent's copy lacks exactly the failing tests; filters work.
(The sandboxed checks, that every bug is caught and fixed, are in tests/environments/test_repo_repair.py.)"""

from __future__ import annotations

import ast
import io
import json
import re
import tarfile

import pytest
import repo_repair as rr


@pytest.fixture(scope="module")
def tasks() -> list[rr.RepairTask]:
    return list(rr.RepoRepair(rr.RepairConfig()).load())


def test_fifty_tasks_from_several_packages_and_operators(tasks: list[rr.RepairTask]) -> None:
    assert len(tasks) >= 50
    assert len({t.data.package for t in tasks}) >= 6
    assert len({t.data.operator for t in tasks}) >= 6
    assert len({t.data.id for t in tasks}) == len(tasks)
    assert [t.data.idx for t in tasks] == list(range(len(tasks)))


def test_the_data_is_compact_and_every_package_keeps_its_licence() -> None:
    total = sum(p.stat().st_size for p in rr.DATA.rglob("*") if p.is_file())
    assert total < 2 * 1024 * 1024, f"{total} bytes of task data"
    for pkg in rr.packages().values():
        files = rr.package_files(pkg.name)
        licence = rr.DATA / "licenses" / f"{pkg.key}.txt"
        assert licence.is_file() and licence.read_bytes() in files.values(), pkg.name
        assert re.fullmatch(r"[0-9a-f]{64}", pkg.sdist_sha256)
        assert pkg.license in ("MIT", "BSD-3-Clause", "Apache-2.0", "ISC", "BSD-2-Clause")
        assert pkg.sources and all(s in files for s in pkg.sources)
        assert pkg.tests and len(set(pkg.tests)) == len(pkg.tests)
        # reproducible archives: sorted members, no owner, no time stamps
        with tarfile.open(fileobj=io.BytesIO((rr.DATA / pkg.archive).read_bytes())) as tar:
            members = tar.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        assert {(m.mtime, m.uid, m.uname) for m in members} == {(0, 0, "")}


def test_every_patch_applies_to_the_pristine_file_and_reverses_exactly(tasks: list[rr.RepairTask]) -> None:
    for task in tasks:
        d = task.data
        pristine = rr.package_files(d.package)[d.file].decode()
        assert rr.patched_path(d.patch) == d.file and d.file in task.package().sources
        buggy = rr.apply_patch(pristine, d.patch)
        assert buggy != pristine
        rr.quiet_parse(buggy)  # the bug is a program, not a syntax error
        assert rr.apply_patch(buggy, d.patch, reverse=True) == pristine, d.id
        assert d.fail_to_pass and set(d.fail_to_pass) <= set(task.package().tests), d.id
        assert set(task.pass_to_pass()).isdisjoint(d.fail_to_pass)


def test_a_patch_that_does_not_match_is_refused() -> None:
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,2 @@\n x = 1\n-y = 2\n+y = 3\n"
    assert rr.apply_patch("x = 1\ny = 2\n", patch) == "x = 1\ny = 3\n"
    assert rr.apply_patch("x = 1\ny = 3\n", patch, reverse=True) == "x = 1\ny = 2\n"
    with pytest.raises(rr.PatchError, match="line 2 does not match"):
        rr.apply_patch("x = 1\ny = 5\n", patch)
    with pytest.raises(rr.PatchError, match="names no file"):
        rr.patched_path("not a diff")


def test_the_agents_copy_lacks_the_failing_tests_and_keeps_the_others(tasks: list[rr.RepairTask]) -> None:
    for task in tasks:
        buggy, visible = task.buggy_files(), task.workspace_files()
        assert visible[task.data.file] == buggy[task.data.file]  # the bug is there
        changed = {p for p in buggy if visible.get(p) != buggy[p]}
        assert changed, task.data.id
        defined: dict[str, set[str]] = {}  # test file -> the functions it still defines
        for node in task.data.fail_to_pass:
            path, *names = node.split("::")
            if path not in visible:
                continue  # hidden whole
            if path not in defined:
                tree = rr.quiet_parse(visible[path])
                defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
            assert re.sub(r"\[.*\]$", "", names[-1]) not in defined[path], (task.data.id, node)
        for path in changed:
            assert path not in task.package().sources  # only tests are hidden, never library code
            if path in visible:
                rr.quiet_parse(visible[path])


def test_the_problem_statement_quotes_failures_not_the_fix(tasks: list[rr.RepairTask]) -> None:
    for task in tasks:
        prompt = task.data.prompt
        assert isinstance(prompt, str) and task.data.fail_to_pass[0] in prompt and ".vf/pytest" in prompt
        fixed_lines = [line[1:].strip() for line in task.data.patch.splitlines() if line.startswith("-") and not line.startswith("---")]
        for line in fixed_lines:
            if len(line) > 12:
                assert line not in prompt, (task.data.id, line)


def test_filters_and_bad_names(tasks: list[rr.RepairTask]) -> None:
    only = list(rr.RepoRepair(rr.RepairConfig(packages=["parse"], operators=["flip_comparison", "off_by_one"])).load())
    assert only and {t.data.package for t in only} == {"parse"}
    assert {t.data.operator for t in only} <= {"flip_comparison", "off_by_one"}
    assert len(only) == sum(1 for t in tasks if t.data.package == "parse" and t.data.operator in ("flip_comparison", "off_by_one"))
    with pytest.raises(ValueError, match="unknown package 'numpy'"):
        list(rr.RepoRepair(rr.RepairConfig(packages=["numpy"])).load())


def test_task_data_survives_the_wire(tasks: list[rr.RepairTask]) -> None:
    for task in tasks[:5]:
        text = task.data.model_dump_json()
        assert rr.RepairData.model_validate_json(text) == task.data
        assert json.loads(text)["fail_to_pass"] == task.data.fail_to_pass
