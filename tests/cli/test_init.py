"""`vf init --classic` / `vf-init --classic`: a classic scaffold that passes its own test, and ids that would
shadow modules refused (by the v1 default too). The v1 scaffold: test_init_v1.py."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from tests.cli.helpers import REPO, run_vf


def test_scaffold_is_complete_and_passes_its_own_test(tmp_path):
    proc = run_vf("init", "sum-pairs", "--classic", "--path", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "sum-pairs"
    for rel in ("pyproject.toml", "README.md", "sum_pairs.py", "tests/test_sum_pairs.py"):
        assert (pkg / rel).is_file(), rel
    meta = tomllib.loads((pkg / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "sum-pairs"
    assert "verifiers>=0.1.9" in meta["project"]["dependencies"]
    assert meta["build-system"]["build-backend"] == "hatchling.build"
    assert meta["tool"]["verifiers"]["eval"] == {"num_examples": 5, "rollouts_per_example": 3}
    readme = (pkg / "README.md").read_text()
    for section in ("## Task", "## Reward", "## Arguments", "## Example"):
        assert section in readme
    assert "def load_environment(" in (pkg / "sum_pairs.py").read_text()

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(REPO)  # our verifiers, as an installed environment would see it
    tested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=pkg,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "4 passed" in tested.stdout
    # The loader finds it through the entry point it declares.
    assert meta["project"]["entry-points"]["verifiers.environments"] == {"sum-pairs": "sum_pairs:load_environment"}
    from verifiers.utils.env_loading import locate

    assert locate(pkg).target == "sum_pairs:load_environment"


def test_owner_ids_name_both_entry_points(tmp_path):
    proc = run_vf("init", "Ada/Word-Count", "--classic", "--path", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    meta = tomllib.loads((tmp_path / "word-count" / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "word-count"
    assert meta["project"]["entry-points"]["verifiers.environments"] == {
        "ada/word-count": "word_count:load_environment",
        "word-count": "word_count:load_environment",
    }
    refused = run_vf("init", "ada/word-count@1.0", "--classic", "--path", str(tmp_path))
    assert refused.returncode == 1 and "without @version" in refused.stderr


def test_scaffold_builds_a_wheel_with_its_module(tmp_path):
    assert run_vf("init", "wheel-check", "--classic", "--path", str(tmp_path)).returncode == 0
    from hatchling.builders.wheel import WheelBuilder

    built = list(
        WheelBuilder(str(tmp_path / "wheel-check")).build(
            directory=str(tmp_path / "dist"), versions=["standard"]
        )
    )
    import zipfile

    names = zipfile.ZipFile(built[0]).namelist()
    assert "wheel_check.py" in names
    assert not any(n.startswith("tests/") for n in names)


def test_existing_files_are_kept_unless_forced(tmp_path):
    assert run_vf("init", "keep-me", "--classic", "--path", str(tmp_path)).returncode == 0
    module = tmp_path / "keep-me" / "keep_me.py"
    module.write_text("# my edits\n")
    again = run_vf("init", "keep-me", "--classic", "--path", str(tmp_path))
    assert again.returncode == 0 and "kept existing keep_me.py" in again.stdout
    assert module.read_text() == "# my edits\n"
    assert run_vf("init", "keep-me", "--classic", "--path", str(tmp_path), "--force").returncode == 0
    assert "def load_environment(" in module.read_text()


@pytest.mark.parametrize(
    "name", ["math", "random", "code", "test", "json", "verifiers", "datasets", "Typing"]
)
def test_ids_that_shadow_modules_are_refused(tmp_path, name):
    proc = run_vf("init", name, "--path", str(tmp_path))
    assert proc.returncode == 1
    assert "shadows" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["9lives", "bad id", "x--y", "ünï"])
def test_malformed_ids_are_refused(tmp_path, name):
    proc = run_vf("init", name, "--path", str(tmp_path))
    assert proc.returncode == 1 and "invalid environment id" in proc.stderr


def test_installed_module_name_is_refused(tmp_path):
    proc = run_vf("init", "pydantic-core", "--path", str(tmp_path))  # module pydantic_core is installed
    assert proc.returncode == 1 and "already installed" in proc.stderr


def test_vf_init_compat_uses_the_classic_layout(tmp_path):
    proc = run_vf("init-check", "--classic", "-p", str(tmp_path / "envs"), script="vf-init")
    assert proc.returncode == 0, proc.stderr
    pkg = tmp_path / "envs" / "init_check"  # the classic tool names the folder with underscores
    assert (pkg / "init_check.py").is_file() and (pkg / "pyproject.toml").is_file()
    (pkg / "README.md").write_text("old")
    assert run_vf("init-check", "--classic", "-p", str(tmp_path / "envs"), script="vf-init").returncode == 0
    assert (pkg / "README.md").read_text() == "old"
    assert (
        run_vf("init-check", "--classic", "-p", str(tmp_path / "envs"), "--rewrite-readme", script="vf-init").returncode
        == 0
    )
    assert "## Reward" in (pkg / "README.md").read_text()
