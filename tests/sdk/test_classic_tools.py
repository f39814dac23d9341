"""``verifiers.utils.tools``: the 0.1.x ready tools answer as 0.1.7's do (checked against its wheel on
these cases), with the model's input kept where it belongs: code in the sandbox, arithmetic by a
bounded tree walk, page reads to public addresses only."""

from __future__ import annotations

import verifiers as vf
from verifiers.testing import by_turn, tool_call, tool_calls
from verifiers.utils.tools import ask, calculator, python


def test_calculator_answers_as_0_1_7_and_never_hangs() -> None:
    assert [calculator(e) for e in ("2 + 2", "3 * (17 + 4)", "100 / 5", "2**-2", "7 // 2")] == ["4", "63", "20.0", "0.25", "3"]
    assert calculator("1/0") == "Error: division by zero"
    assert calculator("2 3") == "Error: invalid syntax (<string>, line 1)"
    assert calculator("__import__('os')") == "Error: Invalid characters in expression"
    # 0.1.7 evaluates this with eval() and never returns; here it is an error at once
    assert calculator("9**9**9**9") == "Error: the result would be too large"
    assert calculator("(10**9000)*(10**9000)*(10**9000)").startswith("Error:")


def test_python_runs_the_models_code_in_the_sandbox(tmp_path, monkeypatch) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host data")
    assert python("x = 5\ny = 10\nx + y") == "15"
    assert python('import sys; print(1); sys.exit("boom")') == "boom"  # errors win over output, as in 0.1.7
    assert "FileNotFoundError" in python(f"open({str(secret)!r}).read()")  # the host's files are not there
    from verifiers.utils import tools

    monkeypatch.setattr(tools, "PYTHON_TIMEOUT_S", 1)  # 10 in use; the message names the limit
    assert python("import time; time.sleep(30)") == "Error: Code execution timed out after 1 seconds"


def test_ask_reads_public_addresses_only() -> None:
    for url in ("http://127.0.0.1:8000/admin", "http://169.254.169.254/latest/meta-data/", "file:///etc/passwd",
                "http://[::1]/", "http://10.0.0.1/"):
        assert ask("what is here?", url) == "Error: Failed to fetch URL contents."


async def test_a_0_1_env_using_the_ready_tools_runs(server_factory) -> None:
    srv = server_factory(by_turn(tool_calls(tool_call("calculator", {"expression": "6*7"}, id="c1")), "42"))
    env = vf.ToolEnv(tools=[python, calculator], dataset=[{"question": "6*7?", "answer": "42"}], max_turns=3)
    out = await env.evaluate(srv.base_url, "m")
    tool_msgs = [m for m in out.state[0]["completion"] if m["role"] == "tool"]
    assert tool_msgs[0]["content"] == "42"
    sent = {t["function"]["name"]: t["function"] for t in srv.requests[0].tools}
    assert set(sent) == {"python", "calculator"} and "code" in sent["python"]["parameters"]["properties"]
