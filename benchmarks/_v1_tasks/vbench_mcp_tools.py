"""The MCP toolset of the benchmark's v1 taskset (``vbench_tasks``): one ``add`` tool, served as
``calc_add``. Written against the original's ``Toolset`` / ``SharedToolsetConfig`` API, which
launches a toolset as ``python -m <its module>``, hence the ``__main__`` block."""

from __future__ import annotations

import verifiers.v1 as vf


class Calc(vf.Toolset[vf.SharedToolsetConfig, vf.State]):
    TOOL_PREFIX = "calc"

    @vf.tool
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        return a + b


def calc_config() -> vf.SharedToolsetConfig:
    return vf.SharedToolsetConfig()


if __name__ == "__main__":
    Calc.run()
