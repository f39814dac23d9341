"""A third-party harness for the tests: its program is a separate Python process that asks the
model once through the interception proxy (plain urllib), as an external agent would."""

from __future__ import annotations

import sys

import verifiers.v1 as vf

PROGRAM = r"""
import json, os, sys, urllib.request
endpoint, prompt = sys.argv[1], sys.argv[2]
body = json.dumps({"model": "any", "messages": [{"role": "user", "content": prompt}], "temperature": 1.5}).encode()
req = urllib.request.Request(endpoint + "/chat/completions", data=body, headers={"content-type": "application/json", "authorization": "Bearer " + os.environ["AGENT_API_KEY"]})
with urllib.request.urlopen(req) as r:
    print(json.load(r)["choices"][0]["message"]["content"])
"""


class CurlHarnessConfig(vf.HarnessConfig):
    id: str = "vf-curl-harness"


class CurlHarness(vf.Harness[CurlHarnessConfig]):
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data):
        prompt = data.prompt[-1].content if isinstance(data.prompt, list) else str(data.prompt)
        await runtime.write("agent.py", PROGRAM)
        result = await runtime.run_program([sys.executable, "agent.py", endpoint, prompt], env={"AGENT_API_KEY": secret}, timeout=60)
        trace.info["program_stdout"] = result.stdout.strip()
        return result


__all__ = ["CurlHarness"]
