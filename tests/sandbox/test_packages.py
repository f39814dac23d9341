"""Host-installed Python packages made importable inside the sandbox (read-only, nothing else)."""

from __future__ import annotations

import logging

import pytest

from verifiers.sandbox import Sandbox
from verifiers.sandbox.packages import PACKAGES_DIR, host_package_binds, missing_in_sandbox_python

from .conftest import REPO

pytestmark = pytest.mark.sandbox


def test_standard_library_needs_no_mount() -> None:
    assert missing_in_sandbox_python(["json", "sqlite3"]) == []
    assert host_package_binds(["json"]) == {}


def test_unknown_package_is_skipped_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert host_package_binds(["no-such-package-vf-test"]) == {}
    assert "no_such_package_vf_test" in caplog.text


async def test_numpy_from_the_host_is_importable_read_only(backend: str) -> None:
    sandbox = Sandbox(backend, python_packages=["numpy"])
    assert all(inside.startswith(PACKAGES_DIR) for inside in sandbox.ro_binds.values())
    result = await sandbox.run(
        python=(
            "import numpy, os\n"
            "print(int(numpy.arange(5).sum()))\n"
            "try:\n"
            "    open(os.path.join(os.path.dirname(numpy.__file__), 'pwned'), 'w')\n"
            "    print('WROTE')\n"
            "except OSError:\n"
            "    print('read-only')\n"
            f"print(os.path.exists({str(REPO)!r}))\n"
        ),
        timeout=60,
    )
    assert result.ok, result
    assert result.stdout.split() == ["10", "read-only", "False"]


async def test_mounted_packages_count_as_installed_libraries(backend: str) -> None:
    """Tools that tell installed libraries from user code by path (dill, whose by-value module
    pickling made datasets' fingerprinting fail on pyarrow in the hub's check) see the mounted
    packages as installed, as on the host."""
    sandbox = Sandbox(backend, python_packages=["dill", "numpy"])
    result = await sandbox.run(
        python="import dill._dill as d, numpy\nprint(d._is_builtin_module(numpy), d._is_builtin_module(d))\n",
        timeout=60,
    )
    assert result.ok, result
    assert result.stdout.split() == ["True", "True"]
