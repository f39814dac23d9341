"""Run by test_v1_train.py::test_vf_train_on_a_v1_environment_through_env_servers: ``vf train CONFIG``
in this fresh interpreter (started with ``-W error::ResourceWarning``), recording what the test
checks into RECORD.json: every trained sample, every episode's trace branches as the env server
sent them, the RL progress bar's updates, the env-server processes the run started, and this
process's children left after the run.

    python v1_train_worker.py CONFIG OUT_DIR RECORD.json [VF TRAIN OPTIONS...]
"""

import json
import os
import sys
from pathlib import Path

import rich.progress

from verifiers.train import env_servers
from verifiers.train.trainer import Trainer


def children() -> list[int]:
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z" and b"resource_tracker" not in cmd:
            out.append(int(pid))
    return out


def descendants(root: int) -> list[int]:
    found, frontier = set(), {root}
    while frontier:
        nxt = set()
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) in frontier and fields[0] != "Z":
                    nxt.add(int(pid))
        found |= nxt
        frontier = nxt
    return sorted(found)


def main() -> None:
    config, out, record_path = sys.argv[1:4]
    record: dict = {"samples": [], "branches": [], "progress": [], "env_server_pids": []}
    step, episode_state, update = Trainer.step, env_servers.episode_state, rich.progress.Progress.update
    ready = env_servers.EnvServers.wait_ready

    def recording_step(self, samples):
        record["samples"] += [{"ids": s.input_ids, "mask": s.loss_mask, "lps": s.inference_logprobs,
                               "reward": s.reward} for s in samples]
        return step(self, samples)

    def recording_state(episode, row, index):
        for trace in episode.traces:
            for b in trace.branches:
                record["branches"].append({"ids": list(b.token_ids), "mask": [int(m) for m in b.sampled_mask],
                                           "lps": list(b.logprobs), "calls": len(b.calls),
                                           "completion_tokens": sum(c.usage.completion_tokens for c in b.calls)})
        return episode_state(episode, row, index)

    def recording_update(self, task_id, **kw):
        if "completed" in kw:
            record["progress"].append(kw["completed"])
        return update(self, task_id, **kw)

    async def recording_ready(self, *args, **kw):
        await ready(self, *args, **kw)
        for target in self.targets.values():
            if target.process is not None:
                record["env_server_pids"] += [target.process.pid, *descendants(target.process.pid)]

    Trainer.step = recording_step
    env_servers.episode_state = recording_state
    rich.progress.Progress.update = recording_update
    env_servers.EnvServers.wait_ready = recording_ready

    from typer.testing import CliRunner

    from verifiers.train.cli import app

    result = CliRunner().invoke(app, [config, "--output", out, *sys.argv[4:]], catch_exceptions=False)
    record["exit_code"] = result.exit_code
    record["output"] = result.output[-3000:]
    record["children_left"] = children()
    Path(record_path).write_text(json.dumps(record))


if __name__ == "__main__":
    main()
