"""`vf model tiny`: a deterministic tiny Llama with a character-level tokenizer that transformers loads."""

from __future__ import annotations

import hashlib
import json

import pytest
from typer.testing import CliRunner

from verifiers.cli.main import app
from verifiers.serving.tiny_model import (
    IM_END,
    IM_START,
    TinyModelSpec,
    parameter_count,
    vocabulary,
    write_tiny_model,
)


def _digest(path):
    return hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny") / "m", TinyModelSpec(seed=7))


def test_same_seed_same_weights_other_seed_other_weights(tmp_path, model_dir):
    again = write_tiny_model(tmp_path / "again", TinyModelSpec(seed=7))
    other = write_tiny_model(tmp_path / "other", TinyModelSpec(seed=8))
    assert _digest(again) == _digest(model_dir)
    assert _digest(other) != _digest(model_dir)
    assert (again / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()


def test_config_shapes_are_the_ones_vllm_cpu_accepts(model_dir):
    config = json.loads((model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] == 64 and config["hidden_size"] == 128
    assert config["num_attention_heads"] == 2 and config["num_hidden_layers"] == 2
    assert config["vocab_size"] == len(vocabulary("chars"))
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == config["eos_token_id"]


def test_transformers_loads_it_and_counts_parameters(model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    assert model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == parameter_count(TinyModelSpec(seed=7))
    with torch.no_grad():
        logits = model(torch.tensor([[1, 10, 20]])).logits
    assert logits.shape == (1, 3, len(vocabulary("chars")))


def test_tokenizer_is_character_level_with_byte_fallback(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    ids = tok("hello", add_special_tokens=False)["input_ids"]
    assert len(ids) == 5 and tok.convert_ids_to_tokens(ids) == list("hello")
    text = "naïve ☃ 12"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    assert len(tok(IM_START, add_special_tokens=False)["input_ids"]) == 1


def test_chat_template_renders_every_role_and_the_generation_prompt(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Add 2 and 3."}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "5"},
    ]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    for piece in ("system\nBe brief.", "user\nAdd 2 and 3.", '"name": "add"', "tool\n5", '"add"'):
        assert piece in text
    assert text.endswith(f"{IM_START}assistant\n")
    assert text.count(IM_END) == 5  # tools block + four messages
    no_prompt = tok.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=False)
    assert not no_prompt.rstrip().endswith("assistant")


def test_cli_writes_a_model_and_refuses_to_clobber(tmp_path):
    runner = CliRunner()
    target = tmp_path / "cli-model"
    result = runner.invoke(app, ["model", "tiny", str(target), "--seed", "3", "--layers", "1"])
    assert result.exit_code == 0, result.output
    assert "vf serve" in result.output
    assert json.loads((target / "config.json").read_text())["num_hidden_layers"] == 1
    again = runner.invoke(app, ["model", "tiny", str(target)])
    assert again.exit_code == 1 and "not empty" in again.output
    forced = runner.invoke(app, ["model", "tiny", str(target), "--force"])
    assert forced.exit_code == 0
    assert json.loads((target / "config.json").read_text())["num_hidden_layers"] == 2


def test_cli_rejects_shapes_vllm_cannot_serve(tmp_path):
    result = CliRunner().invoke(app, ["model", "tiny", str(tmp_path / "m"), "--head-dim", "16"])
    assert result.exit_code == 1
    assert "head_dim 16" in result.output
    bad_vocab = CliRunner().invoke(app, ["model", "tiny", str(tmp_path / "m2"), "--vocab", "words"])
    assert bad_vocab.exit_code == 1 and "--vocab" in bad_vocab.output


def test_bytes_vocabulary_has_only_specials_and_bytes():
    vocab = vocabulary("bytes")
    assert len(vocab) == 6 + 256
    assert vocab[6] == "<0x00>" and vocab[-1] == "<0xFF>"


def test_serve_refuses_a_busy_port_and_a_non_model_folder(tmp_path, model_dir):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", str(model_dir), "--port", str(port)])
    assert result.exit_code == 1 and "already in use" in result.output
    empty = CliRunner().invoke(app, ["serve", str(tmp_path)])
    assert empty.exit_code == 1 and "not a model folder" in empty.output and "vf model tiny" in empty.output
