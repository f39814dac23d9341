"""Score a program by running unit tests against it inside the sandbox.

`run_python_tests` is the shared helper behind code environments: the program and its tests run in
one sandboxed Python process, each test on its own (a failing or hanging test does not hide the
others), and a `TestReport` says how many passed. The program's own output is discarded (it is not
part of the verdict, and a flood of it must not crowd out the result); the result travels on a
private descriptor, tagged with a random token the program never sees, so printing a fake
"all passed" line does not fool the scorer.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from verifiers.sandbox.sandbox import Sandbox
from verifiers.sandbox.types import RunResult

__all__ = ["TestDetail", "TestReport", "run_python_tests"]

# Runs inside the sandbox. Reads the token (first line) and a JSON payload from stdin.
_HARNESS = r"""
import json, os, signal, sys, traceback
_token = sys.stdin.readline().strip()
_job = json.loads(sys.stdin.read())
_report_fd = os.dup(1)
_null = os.open(os.devnull, os.O_RDWR)
for _fd in (0, 1, 2):
    os.dup2(_null, _fd)

class _TestTimeout(BaseException):
    pass

def _on_alarm(signum, frame):
    raise _TestTimeout("test timed out after %ss" % _job["test_timeout"])

signal.signal(signal.SIGALRM, _on_alarm)
_ns = {"__name__": _job["module_name"]}

def _run(source, label):
    if _job["test_timeout"]:
        signal.setitimer(signal.ITIMER_REAL, _job["test_timeout"])
    try:
        exec(compile(source, label, "exec"), _ns)
        if _job["entry_point"] and label != "<program>":
            _ns["check"](_ns[_job["entry_point"]])
        return None
    except BaseException as exc:
        lines = traceback.format_exception_only(type(exc), exc)
        return "".join(lines).strip()[-1000:] or type(exc).__name__
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)

_results = []
_load_error = _run(_job["program"], "<program>")
for _i, _test in enumerate(_job["tests"]):
    if _load_error is not None:
        _results.append([False, "program failed: " + _load_error])
        continue
    _err = _run(_test, "<test %d>" % _i)
    _results.append([_err is None, _err])
os.write(_report_fd, (_token + json.dumps({"load_error": _load_error, "results": _results}) + "\n").encode())
"""


@dataclass
class TestDetail:
    index: int
    passed: bool
    error: str | None = None


@dataclass
class TestReport:
    """How a program fared against its tests. ``error`` is set when no per-test verdict came back
    (the run was killed, or the program ended the process); then every test counts as failed."""

    __test__ = False  # not a pytest test class

    passed: int
    total: int
    details: list[TestDetail] = field(default_factory=list)
    error: str | None = None
    run: RunResult | None = None

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "total": self.total,
            "fraction": self.fraction,
            "error": self.error,
            "details": [d.__dict__ for d in self.details],
        }


async def run_python_tests(
    sandbox: Sandbox,
    program: str,
    tests: str | Sequence[str],
    timeout: float = 10.0,
    *,
    entry_point: str | None = None,
    test_timeout: float | None = None,
    module_name: str = "solution",
    warm: bool | None = None,
) -> TestReport:
    """Run ``program`` then each test against it in one sandboxed process.

    Args:
        sandbox: where to run.
        program: the solution's source (defines the functions under test).
        tests: test sources; a single string is one test. Each runs in the program's namespace
            (asserts raising means failure).
        timeout: wall-clock seconds for the whole run.
        entry_point: HumanEval style: each test defines ``check(candidate)``, which is then called
            with the program's function of this name.
        test_timeout: seconds per test (a hanging test fails alone); None: only the whole-run timeout.
        module_name: ``__name__`` the program sees (not ``"__main__"``, so script blocks stay quiet).
        warm: run in a warm sandbox (pre-started, reset between uses; `verifiers.sandbox.warm`).
            None: warm unless the sandbox was built with ``warm=False``, ``VF_SANDBOX_WARM=0``
            is set, or its backend cannot host warm sandboxes. The verdict is the same either way.
    """
    test_list = [tests] if isinstance(tests, str) else list(tests)
    token = secrets.token_hex(16)
    job = {
        "program": program,
        "tests": test_list,
        "entry_point": entry_point,
        "test_timeout": test_timeout or 0,
        "module_name": module_name,
    }
    result = await sandbox.run(
        python=_HARNESS,
        stdin=token + "\n" + json.dumps(job),
        timeout=timeout,
        warm=sandbox.warm_by_default(warm),
    )
    total = len(test_list)
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(token):
            payload = json.loads(line[len(token) :])
            details = [
                TestDetail(index=i, passed=bool(ok), error=err)
                for i, (ok, err) in enumerate(payload["results"])
            ]
            passed = sum(d.passed for d in details)
            return TestReport(passed, total, details, error=None, run=result)
    if result.killed:
        error = f"killed: {result.kill_reason}"
    else:
        error = f"no test verdict (exit status {result.exit_code}): {result.stderr.strip()[-500:]}"
    details = [TestDetail(index=i, passed=False, error=error) for i in range(total)]
    return TestReport(0, total, details, error=error, run=result)
