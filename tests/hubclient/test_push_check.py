"""`vf push` checks the environment before it builds anything: its ``verifiers.environments`` entry
points, and the conformance checker (``vf check``) in a fresh interpreter; ``--no-check`` skips the
latter."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from hub.testing import HubProcess
from tests.hubclient.helpers import create_user, write_env_package
from verifiers.hub_client.api import HubClientError
from verifiers.hub_client.push import check_conformance, check_entry_points, read_package


def _with_entry_points(pkg: Path, lines: str) -> Path:
    text = (pkg / "pyproject.toml").read_text()
    (pkg / "pyproject.toml").write_text(
        text.replace("[tool.verifiers.eval]", f'[project.entry-points."verifiers.environments"]\n{lines}\n\n[tool.verifiers.eval]')
    )
    return pkg


def test_entry_points_must_name_this_package_and_owner(tmp_path: Path) -> None:
    plain = read_package(write_env_package(tmp_path, "ep-plain"))
    (warning,) = check_entry_points(plain, "ann")
    assert "declares no verifiers.environments entry point" in warning and '"ep-plain" = "ep_plain:load_environment"' in warning
    good = read_package(_with_entry_points(write_env_package(tmp_path, "ep-good"),
                                           '"ep-good" = "ep_good:load_environment"\n"ann/ep-good" = "ep_good:load_environment"'))
    assert check_entry_points(good, "ann") == [] and (good.module, good.attr) == ("ep_good", "load_environment")
    cases = {
        '"other-env" = "ep_bad1:load_environment"': "does not name this package",
        '"bob/ep-bad2" = "ep_bad2:load_environment"': "claims owner 'bob'",
        '"ep-bad3@1.0" = "ep_bad3:load_environment"': "names a version",
        '"ep-bad4" = "ep_bad4"': "expected 'module:function'",
        '"ep-bad5" = "ep_bad5:make"\n"ann/ep-bad5" = "ep_bad5:other"': "name different functions",
    }
    for i, (lines, message) in enumerate(cases.items(), start=1):
        pkg = read_package(_with_entry_points(write_env_package(tmp_path, f"ep-bad{i}"), lines))
        with pytest.raises(HubClientError, match=message):
            check_entry_points(pkg, "ann")


def test_conformance_check_runs_vf_check_in_a_fresh_interpreter(tmp_path: Path) -> None:
    good = read_package(write_env_package(tmp_path, "cc-good", reward_body="return 1.0"))
    assert check_conformance(good)["ok"] is True
    bad = read_package(write_env_package(tmp_path, "cc-bad", reward_body="raise RuntimeError('reward bug')"))
    with pytest.raises(HubClientError, match=r"failed the conformance check: errors \(reward:correct: RuntimeError: reward bug") as info:
        check_conformance(bad)
    assert "--no-check" in (info.value.hint or "")


def test_push_refuses_a_failing_environment_unless_told_not_to_check(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    vf = make_vf(create_user(hub, "quin"))
    pkg = write_env_package(tmp_path, "quin-bad", reward_body="return float('nan')")
    res = vf("push", str(pkg))
    # a NaN reward is recorded on the rollout as a `reward:<name>` error (the engine never passes it on)
    assert res.code == 1 and "failed the conformance check: errors (reward:correct" in res.err, res.text
    assert "returned nan" in res.err, res.text
    assert httpx.get(f"{hub.url}/api/v1/environments/quin/quin-bad", timeout=30).status_code == 404  # nothing uploaded
    res = vf("push", str(pkg), "--no-check")
    assert res.code == 0 and "published quin/quin-bad@1.0.0" in res.out, res.text


def test_install_reports_what_the_loader_finds(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    author = make_vf(create_user(hub, "rory"))
    pkg = _with_entry_points(write_env_package(tmp_path, "rory-env"), '"rory/rory-env" = "rory_env:load_environment"')
    assert author("push", str(pkg)).code == 0
    user = make_vf(create_user(hub, "sam"), venv=True)
    res = user("install", "rory/rory-env@1.0.0")
    assert res.code == 0, res.text
    assert "vf.load_environment('rory/rory-env') loads rory_env:load_environment" in res.out
    loaded = user.python_run(
        "from verifiers.utils.env_loading import locate; import verifiers as vf; "
        "s = locate('rory/rory-env'); env = vf.load_environment('rory/rory-env'); print(s.kind, env.env_version)"
    )
    assert loaded.code == 0 and loaded.out.split() == ["entry_point", "1.0.0"], loaded.text


V1_MODULE = '''
import verifiers.v1 as vf


class EchoData(vf.TaskData):
    answer: str


class EchoTask(vf.Task[EchoData]):
    @vf.reward
    def correct(self, task: EchoData, trace: vf.Trace) -> float:
        return float(task.answer in trace.last_reply)


class EchoTaskset(vf.Taskset[EchoTask]):
    def load(self):
        for i in range(3):
            yield EchoTask(EchoData(prompt=f"say {i}", answer=str(i)))


__all__ = ALL
'''


def _v1_package(root: Path, name: str, all_: str) -> Path:
    """A v1 package: ``__all__`` lists the taskset, no entry point, no load_environment."""
    pkg = write_env_package(root, name)
    (pkg / name.replace("-", "_") / "__init__.py").write_text(V1_MODULE.replace("ALL", all_))
    return pkg


def test_push_publishes_a_v1_package_and_refuses_one_without_a_taskset(hub: HubProcess, make_vf, tmp_path: Path) -> None:
    vf = make_vf(create_user(hub, "vera"))
    res = vf("push", str(_v1_package(tmp_path, "vera-v1", '["EchoTaskset"]')))
    assert res.code == 0 and "published vera/vera-v1@1.0.0" in res.out, res.text
    assert "entry point" not in res.err  # a v1 package has none by design: no advice to add one
    assert httpx.get(f"{hub.url}/api/v1/environments/vera/vera-v1", timeout=30).status_code == 200
    res = vf("push", str(_v1_package(tmp_path, "vera-nots", '["EchoTask"]')))
    assert res.code == 1 and "has no load_environment() function" in res.err and "lists no Taskset subclass" in res.err, res.text
    bad = _v1_package(tmp_path, "vera-reward", '["EchoTaskset"]')
    module = bad / "vera_reward" / "__init__.py"
    module.write_text(module.read_text().replace("return float(task.answer in trace.last_reply)", "raise KeyError('oops')"))
    res = vf("push", str(bad))
    # the model-free noop check (the untouched task scored) fails first, the episodes' errors after it
    assert res.code == 1 and "failed the conformance check: noop (" in res.err and "); errors (" in res.err, res.text
    assert "reward 'correct': raised KeyError: 'oops'" in res.err, res.text
