"""``vf eval`` for v1 environments as a real subprocess against a real loopback model server."""

from __future__ import annotations

import json
import re
import threading

import pytest

from tests.cli.helpers import run_vf
from tests.v1.conftest import PACKAGES
from verifiers.testing.scripted import ScriptedServer


def _answer(req) -> str:
    m = re.search(r"(\d+) \+ (\d+)", req.messages[-1]["content"] or "")
    return str(int(m.group(1)) + int(m.group(2)))


ENV = {"PYTHONPATH_EXTRA": ""}


def _vf(*args, cwd, script="vf"):
    import os

    from tests.cli.helpers import REPO

    return run_vf(*args, script=script, cwd=cwd, env={"PYTHONPATH": f"{REPO}{os.pathsep}{PACKAGES}"})


def test_eval_at_config_writes_traces_and_resumes(tmp_path) -> None:
    config = tmp_path / "eval.toml"
    config.write_text(
        """
model = "scripted-model"
num_rollouts = 2
max_concurrent = 2
output_dir = "out"

[client]
base_url = "BASE"

[sampling]
temperature = 0.3

[select]
limit = 3

[run]
dir = "run1"

[env.taskset]
id = "vf-sums"
n = 5

[env.agent]
max_turns = 2

[env.agent.harness]
id = "null"

[env.agent.runtime]
type = "subprocess"
"""
    )
    gate = threading.Event()
    seen = []

    def script(req):
        seen.append(req.body)
        # the 4th episode's model call fails until the gate opens: the first run records it failed
        if "2 + 3" in req.messages[-1]["content"] and not gate.is_set():
            from verifiers.testing.scripted import error

            return error(400, "not now")
        return _answer(req)

    with ScriptedServer(script) as srv:
        config.write_text(config.read_text().replace("BASE", srv.base_url))
        first = _vf("eval", "@", str(config), cwd=tmp_path)
        # two episodes failed: rows of the run (complete false), and the command itself ran: 0, as the original
        assert first.returncode == 0, first.stderr
        run = tmp_path / "out" / "run1"
        lines = [json.loads(x) for x in (run / "traces.jsonl").read_text().splitlines()]
        assert len(lines) == 6
        assert sum(1 for x in lines if not x["complete"]) == 2
        assert all(b["temperature"] == 0.3 for b in seen)
        meta = json.loads((run / "metadata.json").read_text())
        assert meta["num_rollouts"] == 6 and meta["num_errors"] == 2
        assert (run / "configs" / "eval.json").is_file()
        # also where the original keeps it, the file its own resume command names
        resolved = run / "configs" / "resolved" / "eval.json"
        assert json.loads(resolved.read_text()) == json.loads((run / "configs" / "eval.json").read_text())
        # a resume that would change the plan is refused, nothing run
        n_before = srv.request_count
        changed = _vf("eval", "@", str(config), "--resume", "-r", "3", cwd=tmp_path)
        assert changed.returncode == 1 and "differs in num_rollouts" in changed.stderr, changed.stderr
        assert srv.request_count == n_before
        # a dry run never rewrites the config of a folder that holds a run
        before = resolved.read_text()
        dry = _vf("eval", "@", str(config), "--resume", "-r", "7", "--dry-run", cwd=tmp_path)
        assert dry.returncode == 0, dry.stderr
        assert resolved.read_text() == before and json.loads(dry.stdout)["num_rollouts"] == 7

        gate.set()
        n_before = srv.request_count
        again = _vf("eval", "@", str(config), "--resume", cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        assert srv.request_count - n_before == 2  # only the two failed episodes ran again
        meta = json.loads((run / "metadata.json").read_text())
        assert meta["num_rollouts"] == 6 and meta["num_errors"] == 0 and meta["avg_reward"] == 1.0
        assert "avg_reward" in again.stdout or "reward" in again.stdout

        # --resume <run folder> reads the run's own saved config
        third = _vf("eval", "--resume", str(run), cwd=tmp_path)
        assert third.returncode == 0, third.stderr
        assert srv.request_count - n_before == 2


def test_eval_by_id_with_dotted_overrides_and_vf_eval_script(tmp_path) -> None:
    with ScriptedServer(_answer) as srv:
        res = _vf("eval", "vf-sums", "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "-r", "1",
                  "--env.taskset.n=4", "--env.agent.max-turns", "1", "-o", str(tmp_path / "o"),
                  # the original's spellings: `None` is None, a plugin id is text (`null` names the null harness)
                  "-c", "None", "--env.agent.harness.id", "null", cwd=tmp_path)  # fmt: skip
        assert res.returncode == 0, res.stderr
        (run,) = (tmp_path / "o").iterdir()
        lines = [json.loads(x) for x in (run / "traces.jsonl").read_text().splitlines()]
        assert len(lines) == 2 and all(x["traces"][0]["agent"]["config"]["max_turns"] == 1 for x in lines)
        assert all(x["traces"][0]["agent"]["config"]["harness"]["id"] == "null" for x in lines)
        assert json.loads((run / "configs" / "eval.json").read_text())["max_concurrent"] is None
        # every episode names its eval run, as the original's records do
        assert {(x["run"]["type"], x["run"]["name"]) for x in lines} == {("eval", run.name)}
        assert len({x["run"]["id"] for x in lines}) == 1
        # runs started in the same second get their own folders; a named run's records carry its name
        for _ in range(2):
            again = _vf("eval", "vf-sums", "-m", "scripted-model", "-b", srv.base_url, "-n", "1", "-o", str(tmp_path / "o"),
                        "--env.agent.harness.id", "null", cwd=tmp_path)  # fmt: skip
            assert again.returncode == 0, again.stderr
        assert len(list((tmp_path / "o").iterdir())) == 3
        named = _vf("eval", "vf-sums", "-m", "scripted-model", "-b", srv.base_url, "-n", "1", "-o", str(tmp_path / "n"),
                    "--env.agent.harness.id", "null", "--run.name", "nice-name", "--run.dir", "d1",
                    "--sampling.max-completion-tokens", "11", cwd=tmp_path)  # fmt: skip
        assert named.returncode == 0, named.stderr
        row = json.loads((tmp_path / "n" / "d1" / "traces.jsonl").read_text().splitlines()[0])
        assert row["run"]["name"] == "nice-name"
        # the cap goes out as max_tokens, as the original sends it
        assert srv.requests[-1].body.get("max_tokens") == 11 and "max_completion_tokens" not in srv.requests[-1].body
        # the original's console-script name runs v1 too
        # and --no-rich prints each trace as JSON on stdout, nothing else (the summary on stderr)
        res = _vf("vf-sums", "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "-o", str(tmp_path / "p"), "--no-rich",
                  cwd=tmp_path, script="vf-eval")  # fmt: skip
        assert res.returncode == 0, res.stderr
        assert len(list((tmp_path / "p").iterdir())) == 1
        decoder, text, printed = json.JSONDecoder(), res.stdout.strip(), []
        while text:
            trace, end = decoder.raw_decode(text)
            printed.append(trace)
            text = text[end:].strip()
        (run,) = (tmp_path / "p").iterdir()
        saved = [t for line in (run / "traces.jsonl").read_text().splitlines() for t in json.loads(line)["traces"]]
        assert sorted(t["id"] for t in printed) == sorted(t["id"] for t in saved) and len(printed) == 2
        assert all(t["rewards"] == s["rewards"] and None not in t.values() for t, s in zip(
            sorted(printed, key=lambda t: t["id"]), sorted(saved, key=lambda t: t["id"]), strict=True))  # fmt: skip
        assert "v1 eval" in res.stderr


def test_bad_config_is_one_line(tmp_path) -> None:
    res = _vf("eval", "vf-sums", "--env.agent.runtime.type", "docker", "-m", "x", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().count("\n") == 0 and "docker" in res.stderr and "Traceback" not in res.stderr
    res = _vf("eval", "vf-sums", "--env.agnt.max-turns", "2", "-m", "x", cwd=tmp_path)
    assert res.returncode == 1 and "agnt" in res.stderr and "Traceback" not in res.stderr
    res = _vf("eval", "vf-sums", "--resume", "-m", "x", cwd=tmp_path)  # which run? (names are stamped)
    assert res.returncode == 1 and "run.dir" in res.stderr
    res = _vf("eval", "@", str(tmp_path / "missing.toml"), cwd=tmp_path)
    assert res.returncode == 1 and "does not exist" in res.stderr
    res = _vf("eval", "vf-sums", "--env.taskset.id", "other-sums", "-m", "x", cwd=tmp_path)
    assert res.returncode == 1 and "set twice" in res.stderr and "Traceback" not in res.stderr
    # an endless (INFINITE) taskset without -n: refused at once in one line, as the original refuses
    # it (it used to read tasks forever, its memory growing); with -n it is a bounded view
    res = _vf("eval", "vf-counter", "-m", "x", "-b", "http://127.0.0.1:9/v1", cwd=tmp_path)
    assert res.returncode == 1 and res.stderr.strip().endswith("is infinite - bound the run with -n")
    assert "Traceback" not in res.stderr and not (tmp_path / "outputs").exists()


def test_list_flags_take_one_value_or_several_as_the_originals_do() -> None:
    from verifiers.cli.v1_eval import V1EvalConfig, parse_argv

    assert parse_argv(["my-ts", "--select.exclude.names", "t2"])[0]["select"] == {"exclude": {"names": ["t2"]}}
    tree, _ = parse_argv(["--select.include.names", "t3", "t5", "-n", "2"])
    assert tree["select"] == {"include": {"names": ["t3", "t5"]}, "limit": "2"}  # text until typed by its field
    assert V1EvalConfig.model_validate(tree).select.limit == 2
    tree, _ = parse_argv(["--select.include.ids", '["a", "b"]', "my-ts"])  # a JSON list is the whole value
    assert tree["select"]["include"]["ids"] == ["a", "b"] and tree["env"]["taskset"]["id"] == "my-ts"
    assert parse_argv(["--select.include.idx=0:5"])[0]["select"]["include"]["idx"] == ["0:5"]


def test_a_config_in_the_originals_resolved_shape_runs_and_its_other_keys_act(tmp_path) -> None:
    """The keys the original's eval config has beyond ours' core ones: ``[client]`` ``type``,
    ``headers_from_env`` and the per-phase ``timeout`` table, ``rich``, ``dry_run``, ``clean``,
    ``run.attach``. Each is taken and does what it says, or is refused in one line."""
    import os

    from tests.cli.helpers import REPO
    from verifiers.cli.v1_eval import ClientSection

    env = {"PYTHONPATH": f"{REPO}{os.pathsep}{PACKAGES}", "VF_TEST_TEAM": "team-7"}
    config = tmp_path / "eval.toml"
    config.write_text(
        """
model = "scripted-model"
output_dir = "out"

[rich]
show_logs = false

[client]
type = "eval"
base_url = "BASE"
headers = {X-Team = "static", X-Static = "s"}
headers_from_env = {X-Team = "VF_TEST_TEAM", X-Unset = "VF_TEST_NOT_SET"}

[client.timeout]
connect = 30.0
read = 90.0

[run]
dir = "r"

[select]
limit = 2

[env.taskset]
id = "vf-sums"
n = 3

[env.agent.harness]
id = "null"

[env.agent.runtime]
type = "subprocess"
"""
    )
    seen: list[dict] = []

    def script(req):
        seen.append(req.headers)
        return _answer(req)

    with ScriptedServer(script) as srv:
        config.write_text(config.read_text().replace("BASE", srv.base_url))
        run = tmp_path / "out" / "r"

        dry = run_vf("eval", "@", str(config), "--dry-run", cwd=tmp_path, env=env)
        assert dry.returncode == 0, dry.stderr
        resolved = json.loads(dry.stdout)
        assert resolved["client"]["timeout"] == {"connect": 30.0, "read": 90.0, "write": None, "pool": None}
        assert resolved["env"]["taskset"]["id"] == "vf-sums" and seen == []  # nothing ran
        # as the original, the resolved config is kept where the run will be, and nothing else
        assert [p.relative_to(run).as_posix() for p in run.rglob("*") if p.is_file()] == ["configs/resolved/eval.json"]

        first = run_vf("eval", "@", str(config), cwd=tmp_path, env=env)
        assert first.returncode == 0, first.stderr
        assert len(seen) == 2 and all(h["x-team"] == "team-7" and h["x-static"] == "s" and "x-unset" not in h for h in seen)
        again = run_vf("eval", "@", str(config), cwd=tmp_path, env=env)
        assert again.returncode == 1 and "already holds a run" in again.stderr
        (run / "keep-me").write_text("x")
        clean = run_vf("eval", "@", str(config), "--clean", cwd=tmp_path, env=env)
        assert clean.returncode == 0, clean.stderr
        assert not (run / "keep-me").exists() and len((run / "traces.jsonl").read_text().splitlines()) == 2

        # clean never deletes what is not a run folder inside output_dir
        (tmp_path / "out" / "precious").mkdir()
        (tmp_path / "out" / "precious" / "data").write_text("x")
        for where in ("..", "precious"):
            refused = run_vf("eval", "@", str(config), "--clean", "--run.dir", where, cwd=tmp_path, env=env)
            assert refused.returncode == 1 and "nothing was deleted" in refused.stderr, refused.stderr
        assert (tmp_path / "out" / "precious" / "data").is_file() and config.is_file()

        for flag, value, needle in (("--client.type", "train", "TrainClient"), ("--run.attach", "eval-123", "run.attach")):
            res = run_vf("eval", "@", str(config), flag, value, "--run.dir", "x", cwd=tmp_path, env=env)
            assert res.returncode == 1 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr
            assert res.stderr.strip().count("\n") == 0

    # the timeout table is one bound on our client: connect + read; without read, our own default
    assert ClientSection.model_validate({"timeout": {"connect": 5, "read": 20}}).client_fields()["timeout"] == 25.0
    assert "timeout" not in ClientSection.model_validate({"timeout": {"connect": 30}}).client_fields()
    assert ClientSection.model_validate({"timeout": 12}).client_fields()["timeout"] == 12.0


def test_client_defaults_read_the_environment_as_the_original_does(monkeypatch) -> None:
    """No base_url: $VF_BASE_URL, then the original's $PRIME_INFERENCE_URL, else a local server (never
    a hosted one); no api_key_var: the key in $PRIME_API_KEY, else "EMPTY" (the original's)."""
    from verifiers.cli.v1_eval import ClientSection
    from verifiers.v1.configs.client import DEFAULT_BASE_URL

    for var in ("VF_BASE_URL", "PRIME_INFERENCE_URL", "PRIME_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    fields = ClientSection().client_fields()
    assert fields["base_url"] == DEFAULT_BASE_URL and fields["api_key"] == "EMPTY"
    monkeypatch.setenv("PRIME_INFERENCE_URL", "http://inference.example/v1")
    monkeypatch.setenv("PRIME_API_KEY", "sk-prime")
    fields = ClientSection().client_fields()
    assert fields["base_url"] == "http://inference.example/v1" and fields["api_key"] == "sk-prime"
    monkeypatch.setenv("VF_BASE_URL", "http://local.example/v1")
    assert ClientSection().client_fields()["base_url"] == "http://local.example/v1"
    given = ClientSection.model_validate({"base_url": "http://given.example/v1", "api_key_var": "MY_KEY"}).client_fields()
    assert given["base_url"] == "http://given.example/v1" and given["api_key_var"] == "MY_KEY" and "api_key" not in given


def test_flag_values_are_typed_by_the_knob_they_set_as_the_originals_are() -> None:
    """A text knob keeps what was written (``2024``, ``true``, ``[1]``, ``null``), any other reads
    it as JSON; a bare knob flag is true; a knob given several words is a list; what is saved reads
    back as it ran."""
    from verifiers.cli.v1_eval import V1EvalConfig, parse_argv
    from verifiers.v1.configs.flags import resolved_like
    from verifiers.v1.env import load_environment
    from verifiers.v1.plugins import PluginError

    argv = ["vf-knobs", "--env.taskset.subset", "2024", "--env.taskset.tag", "null", "--env.taskset.words", "a", "1", "[x]",
            "--env.taskset.hint", "--env.taskset.count", "3", "--env.taskset.weights.k", "1.5", "--env.agent.max-turns", "2",
            "--sampling.temperature", "0.5", "--sampling.extra_body.top_k", "20", "-n", "1", "--env.agent.harness.id", "null"]  # fmt: skip
    tree, _ = parse_argv(argv)
    cfg = V1EvalConfig.model_validate(tree)
    env = load_environment(cfg.env)
    knobs = env.config.taskset
    assert (knobs.subset, knobs.tag, knobs.words, knobs.hint, knobs.count, knobs.weights) == ("2024", "null", ["a", "1", "[x]"], True, 3, {"k": 1.5})
    assert env.config.agent.max_turns == 2 and env.config.agent.harness.id == "null"
    assert cfg.sampling == {"temperature": 0.5, "extra_body": {"top_k": 20}} and cfg.select.limit == 1
    saved = resolved_like(cfg.env, env.config)
    assert saved["taskset"] == {"id": "vf-knobs", "subset": "2024", "tag": "null", "words": ["a", "1", "[x]"], "hint": True,
                                "count": 3, "weights": {"k": 1.5}}  # fmt: skip
    assert load_environment(json.loads(json.dumps(saved))).config.taskset == knobs  # reads back as it ran
    # a knob flag that is last, or before another flag, is a bare flag; a top-level one needs its value
    bare = V1EvalConfig.model_validate(parse_argv(["vf-knobs", "--env.taskset.hint"])[0]).env
    assert load_environment(bare).config.taskset.hint is True
    from verifiers.cli.errors import UserError

    with pytest.raises(UserError, match="-m needs a value"):
        parse_argv(["vf-knobs", "-m"])
    # a negative number is a value, not a flag
    assert parse_argv(["vf-knobs", "--env.taskset.count", "-1"])[0]["env"]["taskset"]["count"] == "-1"
    assert parse_argv(["--select.include.idx", "-1"])[0]["select"]["include"]["idx"] == ["-1"]
    # a short flag or an alias needs its value; a bare knob flag sets only a true/false knob
    for bare in (["-n"], ["--temperature"], ["--num-examples"]):
        with pytest.raises(UserError, match="needs a value"):
            parse_argv(["vf-knobs", *bare])
    for knob in ("count", "subset"):
        with pytest.raises(PluginError, match="true/false knob"):
            load_environment(V1EvalConfig.model_validate(parse_argv(["vf-knobs", f"--env.taskset.{knob}"])[0]).env)
    # one word for a list knob is a list of one (null too: it is a word), as the original's
    one = load_environment(V1EvalConfig.model_validate(parse_argv(["vf-knobs", "--env.taskset.words", "null"])[0]).env)
    assert one.config.taskset.words == ["null"]
    # a flag that takes no value may still be given true or false
    assert parse_argv(["vf-knobs", "--save", "false", "--verbose", "true"])[0] | {} == {
        "save": False, "verbose": True, "env": {"taskset": {"id": "vf-knobs"}}}


def test_a_resume_of_the_originals_run_folder_never_pushes_unasked(tmp_path) -> None:
    """The original's saved config holds its ``push = true`` default: resuming its run folder
    takes the plan, not what the run did after it ended."""
    from verifiers.cli.v1_eval import V1EvalConfig, parse_argv, run

    run_dir = tmp_path / "out" / "r"
    (run_dir / "configs" / "resolved").mkdir(parents=True)
    saved = {"model": "m", "push": True, "env": {"taskset": {"id": "vf-knobs"}}, "output_dir": str(tmp_path / "out")}
    (run_dir / "configs" / "resolved" / "eval.json").write_text(json.dumps(saved))
    _tree, resume_dir = parse_argv(["--resume", str(run_dir), "--dry-run"])
    assert resume_dir == run_dir
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run(["--resume", str(run_dir), "--dry-run"]) == 0
    resolved = json.loads(out.getvalue())
    assert resolved["push"] is False and resolved["model"] == "m" and V1EvalConfig.model_validate(resolved).resume


def test_vf_validate_types_taskset_knobs_as_vf_eval_does(tmp_path) -> None:
    res = _vf("validate", "vf-knobs", "--taskset.subset", "2024", "--taskset.words", "a", "--only-setup", "-n", "1", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    # the report names each role's harness as it resolved: the taskset package's own, not "null"
    res = _vf("validate", "vf-own-harness", "--only-setup", "-n", "1", "--json", cwd=tmp_path)
    load = next(c for c in json.loads(res.stdout)["checks"] if c["name"] == "load")
    assert "env single-agent (agent: vf_own_harness harness on subprocess)" in load["detail"], load


def test_sigterm_ends_a_run_as_ctrl_c_does_and_it_resumes(tmp_path) -> None:
    """A scheduler's SIGTERM: the run stops as on Ctrl-C (exit 130, 'interrupted', finished episodes
    kept, every rollout's cleanup run), not killed mid-write; ``--resume`` finishes it."""
    import os
    import signal
    import subprocess

    from tests.cli.helpers import REPO, vf_command

    gate = threading.Event()
    calls = []

    def script(req):
        calls.append(1)
        if len(calls) > 1:
            gate.wait(30)  # the first episode finishes; the others wait for the gate
        return _answer(req)

    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": f"{REPO}{os.pathsep}{PACKAGES}"}
    args = ["eval", "vf-sums", "-m", "scripted-model", "-n", "3", "-c", "3", "--env.agent.harness.id", "null",
            "-o", str(tmp_path / "o"), "--run.dir", "r"]  # fmt: skip
    with ScriptedServer(script) as srv:
        proc = subprocess.Popen([*vf_command(), *args, "-b", srv.base_url], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
        # (SIGINT as a terminal leaves it, whatever the test runner inherited: below, the ignored case)
        try:
            traces = tmp_path / "o" / "r" / "traces.jsonl"
            for _ in range(1200):  # the first episode saved, another one waiting at the server
                if len(calls) >= 2 and traces.exists() and traces.read_text().strip():
                    break
                threading.Event().wait(0.05)
            proc.send_signal(signal.SIGTERM)
            _out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 130 and "interrupted" in err, (proc.returncode, err)
        # started with SIGINT ignored (`cmd &` in a script), SIGTERM keeps its default: it ends the process
        ignoring = subprocess.Popen([*vf_command(), *args[:-2], "--run.dir", "r2", "-b", srv.base_url], cwd=tmp_path,
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
        try:
            for _ in range(1200):
                if (tmp_path / "o" / "r2" / "configs" / "eval.json").exists():
                    break
                threading.Event().wait(0.05)
            ignoring.send_signal(signal.SIGTERM)
            assert ignoring.wait(timeout=60) == -signal.SIGTERM
        finally:
            if ignoring.poll() is None:
                ignoring.kill()
        kept = [json.loads(x) for x in traces.read_text().splitlines()]
        assert len(kept) == 1 and kept[0]["complete"]  # the finished episode was saved
        gate.set()
        res = _vf("eval", "--resume", str(tmp_path / "o" / "r"), cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    rows = [json.loads(x) for x in traces.read_text().splitlines()]
    assert len(rows) == 3 and all(x["complete"] for x in rows)


def test_argv_and_resume_details(tmp_path) -> None:
    """A positional id wins over a config file's (only two command-line spellings must agree), and a
    run saved with ``max_completion_tokens`` resumes under the ``max_tokens`` spelling."""
    from verifiers.cli.errors import UserError
    from verifiers.cli.v1_eval import SAVED_CONFIGS, _same_plan, parse_argv

    config = tmp_path / "eval.toml"
    config.write_text('[env.taskset]\nid = "vf-sums"\n')
    tree, _ = parse_argv(["vf-other", "@", str(config)])
    assert tree["env"]["taskset"]["id"] == "vf-other"
    with pytest.raises(UserError, match="set twice"):
        parse_argv(["vf-other", "--env.taskset.id", "vf-sums"])
    run = tmp_path / "run"
    (run / "configs").mkdir(parents=True)
    old = {"model": "m", "sampling": {"max_completion_tokens": 64}, "num_rollouts": 1}
    (run / SAVED_CONFIGS[0]).write_text(json.dumps(old))
    _same_plan(run, {**old, "sampling": {"max_tokens": 64}})  # the same plan, in today's spelling
    with pytest.raises(UserError, match="differs in sampling"):
        _same_plan(run, {**old, "sampling": {"max_tokens": 65}})


def test_eval_takes_a_v1_package_folder_and_an_id_beside_a_folder_of_its_name(tmp_path) -> None:
    """``vf eval ./my-taskset`` runs the v1 package in that folder, and ``vf eval my_taskset`` run
    where a folder of that name is runs the package (both went to the classic eval and failed)."""
    import os

    from tests.cli.helpers import REPO
    from tests.cli.test_validate import write_v1_package

    folder = write_v1_package(tmp_path, "v1evalmod")  # the folder and its module share the name
    with ScriptedServer(_answer) as srv:
        for target, out in ((str(folder), "by-path"), ("v1evalmod", "by-id")):
            env = {"PYTHONPATH": os.pathsep.join((str(REPO), str(PACKAGES), str(folder)))}
            res = run_vf("eval", target, "-m", "scripted-model", "-b", srv.base_url, "-n", "2", "-r", "1",
                         "-o", str(tmp_path / out), cwd=tmp_path, env=env)  # fmt: skip
            assert res.returncode == 0, res.stdout + res.stderr
            (run,) = (tmp_path / out).iterdir()
            lines = [json.loads(x) for x in (run / "traces.jsonl").read_text().splitlines()]
            assert len(lines) == 2 and all(x["reward"] == 1.0 for x in lines), lines
            assert all(x["task"]["type"] == "AddTask" for x in lines)
