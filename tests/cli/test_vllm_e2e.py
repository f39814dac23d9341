"""End to end against a REAL vLLM server (CPU build) serving the tiny model.

`vf eval` runs as a subprocess with vLLM's token-data extras, and the saved run must carry token
ids and sampled logprobs on every trajectory step, consistent with the model's tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.helpers import run_vf, write_env_file

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

TOKEN_ENV = '''
import verifiers as vf


def printable_fraction(completion, **kwargs) -> float:
    """Share of printable ASCII characters in the reply (a random model scores in between)."""
    text = completion[-1]["content"] or ""
    return sum(32 <= ord(c) < 127 for c in text) / len(text) if text else 0.0


def load_environment(**kwargs):
    rows = [{"question": f"Count to {i}.", "answer": str(i)} for i in range(1, 6)]
    return vf.SingleTurnEnv(dataset=rows, system_prompt="Be brief.", rubric=vf.Rubric(funcs=[printable_fraction]),
                            **kwargs)
'''

SAMPLING = '{"logprobs": true, "extra_body": {"return_token_ids": true}}'


def test_vf_eval_against_real_vllm_keeps_token_data(vllm_server, tiny_model_dir, tmp_path):
    from transformers import AutoTokenizer

    env = write_env_file(tmp_path, "token_env_e2e", TOKEN_ENV)
    out = tmp_path / "outputs"
    proc = run_vf(
        "eval", str(env), "-b", vllm_server.base_url, "-m", vllm_server.model,
        "-n", "3", "-r", "2", "-t", "8", "-T", "1.0", "-S", SAMPLING, "-o", str(out),
        timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [p.parent for p in out.rglob("metadata.json")]
    assert len(runs) == 1
    run = runs[0]
    assert str(run) in proc.stdout.replace("\n", "")

    meta = json.loads((run / "metadata.json").read_text())
    assert meta["num_rollouts"] == 6 and meta["num_examples"] == 3 and meta["num_errors"] == 0
    assert meta["model"] == vllm_server.model
    assert meta["sampling_args"]["logprobs"] is True
    assert meta["sampling_args"]["extra_body"] == {"return_token_ids": True}
    assert meta["sampling_args"]["max_tokens"] == 8
    assert 0.0 <= meta["avg_reward"] <= 1.0

    vocab_size = json.loads((Path(tiny_model_dir) / "config.json").read_text())["vocab_size"]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    records = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert len(records) == 6
    for record in records:
        assert record["error"] is None
        steps = record["trajectory"]
        assert len(steps) == 1  # single-turn: one model turn
        tokens = steps[0]["tokens"]
        prompt_ids, ids, logprobs = (
            tokens["prompt_ids"],
            tokens["completion_ids"],
            tokens["completion_logprobs"],
        )
        assert 1 <= len(ids) <= 8
        assert len(ids) == len(logprobs)
        assert all(isinstance(i, int) and 0 <= i < vocab_size for i in ids + prompt_ids)
        assert all(isinstance(lp, float) and lp <= 0.0 for lp in logprobs)
        # vLLM tokenised exactly what the chat template renders for this prompt
        rendered = tokenizer.apply_chat_template(record["prompt"], tokenize=False, add_generation_prompt=True)
        assert prompt_ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]
        assert record["usage"]["completion_tokens"] == len(ids)
        # the saved text comes from these ids: every character token appears in it, in order (byte
        # tokens are left out: invalid UTF-8 runs decode differently in vLLM's incremental detokenizer)
        text = record["completion"][-1]["content"] or ""
        chars = [t for t in tokenizer.convert_ids_to_tokens(ids) if len(t) == 1]
        rest = iter(text)
        assert all(c in rest for c in chars), (chars, text)

    shown = run_vf("results", str(run))
    assert shown.returncode == 0 and "Count to" in shown.stdout
