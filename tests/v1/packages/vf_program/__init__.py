"""A task whose metric runs the model's program in the rollout's runtime, the way tasksets written
for the original 0.3/0.4 releases do: ``runtime.write(path, bytes)``, ``runtime.run(argv, env)``
(an argv list and a positional env), ``result.exit_code``, ``runtime.read(path)`` as bytes; the
metric returns a dict of several metrics, which a reward then reads off the trace."""

import re

import verifiers.v1 as vf


class ProgramData(vf.TaskData):
    expected: str


class ProgramTask(vf.Task[ProgramData]):
    @vf.metric
    async def check(self, trace: vf.Trace, runtime: vf.Runtime) -> dict[str, float]:
        m = re.search(r"```python\n(.*?)```", trace.last_reply or "", re.DOTALL)
        if m is None:
            return {"passed": 0.0, "size": 0.0}
        await runtime.write("prog.py", m.group(1).encode())
        result = await runtime.run(["python3", "prog.py"], {"GREETING": "hi"})
        await runtime.run(["sh", "-c", 'printf "%s" "$GREETING" > out.bin'], {"GREETING": "hé"})
        raw = await runtime.read("out.bin")
        passed = result.exit_code == 0 and result.stdout.strip() == self.data.expected
        return {"passed": float(passed), "size": float(len(m.group(1))), "read_bytes": float(raw == "hé".encode())}

    @vf.reward
    async def correct(self, trace: vf.Trace) -> float:
        return trace.metrics.get("passed", 0.0)


class ProgramTaskset(vf.Taskset[ProgramTask, vf.TasksetConfig]):
    def load(self) -> list[ProgramTask]:
        return [
            ProgramTask(ProgramData(idx=0, prompt="Print the greeting from $GREETING.", expected="hi"), self.config.task),
            ProgramTask(ProgramData(idx=1, prompt="Print 6 * 7.", expected="42"), self.config.task),
        ]


__all__ = ["ProgramTaskset"]
