"""Write a tiny, randomly initialised Llama-style model that vLLM (CPU) and transformers both load.

Why: tests, the demo and laptop training runs need a real model behind a real inference server,
and nothing may be downloaded. A few hundred thousand parameters are enough to exercise every
code path (chat template, sampling, logprobs, token ids, weight reloads) in seconds on a CPU.

Shapes: vLLM's CPU attention rejects head dimension 16; 64 works, so the head dimension is fixed
at 64 by default (hidden 128 = 2 heads x 64). Weights are float32 safetensors.

The tokenizer is character level, built with the ``tokenizers`` library: special tokens, the
printable ASCII characters plus newline and tab (one token each), and 256 byte tokens
(``<0x00>`` ... ``<0xFF>``) as a fallback so any Unicode text round-trips.
"""

from __future__ import annotations

import json
import string
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

VocabKind = Literal["chars", "bytes"]

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK, IM_START, IM_END]

#: ChatML-style template. Handles system/user/assistant/tool roles, list-of-parts content, assistant
#: tool calls (rendered as JSON inside <tool_call> tags), a tool list, and add_generation_prompt.
CHAT_TEMPLATE = """\
{%- if tools %}<|im_start|>system
# Tools
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}<|im_end|>
{% endif -%}
{%- for message in messages -%}
<|im_start|>{{ message['role'] }}
{% if message['content'] is string -%}
{{ message['content'] }}
{%- elif message['content'] is iterable -%}
{%- for part in message['content'] %}{% if part['type'] == 'text' %}{{ part['text'] }}{% endif %}{% endfor -%}
{%- endif -%}
{%- if message['tool_calls'] is defined and message['tool_calls'] -%}
{%- for call in message['tool_calls'] %}
<tool_call>{"name": {{ call['function']['name'] | tojson }}, "arguments": {{ call['function']['arguments'] | tojson }}}</tool_call>
{%- endfor -%}
{%- endif %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}
"""


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape and seed of a tiny model; the defaults are the ones measured to work in vLLM CPU."""

    hidden: int = 128
    layers: int = 2
    heads: int = 2
    kv_heads: int | None = None
    head_dim: int = 64
    intermediate: int = 256
    max_positions: int = 2048
    vocab: VocabKind = "chars"
    seed: int = 0
    init_std: float = 0.02


def vocabulary(kind: VocabKind = "chars") -> list[str]:
    """Token strings in id order: special tokens, then characters (``chars`` only), then bytes."""
    if kind not in ("chars", "bytes"):
        raise ValueError(f"vocab must be 'chars' or 'bytes', not {kind!r}")
    chars: list[str] = []
    if kind == "chars":
        printable = [c for c in string.printable if c not in "\r\x0b\x0c"]  # ASCII 32-126, \n, \t
        chars = sorted(printable, key=ord)
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    return [*SPECIAL_TOKENS, *chars, *byte_tokens]


def build_tokenizer(kind: VocabKind = "chars"):  # -> tokenizers.Tokenizer (imported lazily)
    """A character-level ``tokenizers.Tokenizer`` with byte fallback and no merges."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    vocab = {tok: i for i, tok in enumerate(vocabulary(kind))}
    # A BPE model without merges maps each character to its own id, and byte_fallback turns any
    # character outside the vocabulary into its UTF-8 bytes instead of <unk>.
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK, byte_fallback=True))
    tok.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    return tok


def write_tiny_model(
    out_dir: str | Path, spec: TinyModelSpec | None = None, *, overwrite: bool = False
) -> Path:
    """Write config, float32 safetensors weights, tokenizer, chat template and generation config.

    Deterministic: the same spec (seed included) gives byte-identical weight files. Refuses to
    write into a non-empty folder unless ``overwrite`` is true, so a typo cannot clobber a real model.
    """
    spec = spec or TinyModelSpec()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"{out} exists and is not a folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{out} is not empty (use overwrite=True, or --force with vf model tiny, to replace it)"
        )
    if spec.head_dim < 32 or spec.head_dim % 16:
        raise ValueError(f"head_dim {spec.head_dim} is not supported by vLLM's CPU attention; use 64")
    if spec.head_dim not in (64, 128):
        warnings.warn(
            f"head_dim {spec.head_dim} is untested with vLLM CPU; 64 is known to work", stacklevel=2
        )
    kv_heads = spec.kv_heads or spec.heads
    if spec.heads % kv_heads:
        raise ValueError(f"heads ({spec.heads}) must be a multiple of kv_heads ({kv_heads})")

    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tokenizer_obj = build_tokenizer(spec.vocab)
    vocab_size = tokenizer_obj.get_vocab_size(with_added_tokens=True)
    ids = {t: tokenizer_obj.token_to_id(t) for t in SPECIAL_TOKENS}

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden,
        intermediate_size=spec.intermediate,
        num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads,
        num_key_value_heads=kv_heads,
        head_dim=spec.head_dim,
        max_position_embeddings=spec.max_positions,
        initializer_range=spec.init_std,
        pad_token_id=ids[PAD],
        bos_token_id=ids[BOS],
        eos_token_id=ids[EOS],
        tie_word_embeddings=False,
        dtype="float32",
    )
    out.mkdir(parents=True, exist_ok=True)
    # Fork the RNG so writing a model never perturbs the caller's torch random state.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(spec.seed)
        model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=ids[BOS], eos_token_id=ids[EOS], pad_token_id=ids[PAD]
    )
    model.save_pretrained(out)

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer_obj,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        pad_token=PAD,
        additional_special_tokens=[IM_START, IM_END],
        model_max_length=spec.max_positions,
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    n_params = sum(p.numel() for p in model.parameters())
    (out / "README.md").write_text(
        "# Tiny random Llama\n\n"
        "Written by `vf model tiny`: randomly initialised, untrained; for tests and demos only.\n\n"
        f"- parameters: {n_params:,}\n- vocabulary: {vocab_size} tokens ({spec.vocab}, byte fallback)\n"
        f"- spec: `{json.dumps(asdict(spec), sort_keys=True)}`\n"
    )
    return out


def parameter_count(spec: TinyModelSpec) -> int:
    """Parameters of a model with this spec, computed from the shapes (no torch needed)."""
    vocab_size = len(vocabulary(spec.vocab))
    kv_heads = spec.kv_heads or spec.heads
    attn = spec.hidden * spec.head_dim * (spec.heads * 2 + kv_heads * 2)  # q, o, k, v
    mlp = 3 * spec.hidden * spec.intermediate
    norms = 2 * spec.hidden
    return 2 * vocab_size * spec.hidden + spec.layers * (attn + mlp + norms) + spec.hidden
