"""Packing invariants and boundary-respecting forward passes."""

import random

import pytest
import torch

from verifiers.train.packing import first_fit_decreasing, pack
from verifiers.train.samples import Sample


def rand_samples(n, seed=0, max_len=30):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        L = rng.randint(2, max_len)
        p = rng.randint(1, L - 1)
        out.append(Sample([rng.randint(3, 40) for _ in range(L)], [0] * p + [1] * (L - p),
                          [-rng.random() for _ in range(L)], advantages=[rng.random()] * L))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_pack_invariants(seed):
    samples = rand_samples(40, seed)
    T = 64
    b = pack(samples, T)
    # every sample appears exactly once, contiguous, with position ids 0..len-1 and its own tokens
    seen = set()
    for r in range(b.num_rows):
        ids = b.sample_ids[r].tolist()
        for i in set(ids) - {-1}:
            pos = [t for t in range(T) if ids[t] == i]
            assert pos == list(range(pos[0], pos[0] + len(samples[i])))
            assert b.position_ids[r, pos].tolist() == list(range(len(samples[i])))
            assert b.input_ids[r, pos].tolist() == samples[i].input_ids
            expect_mask = list(samples[i].loss_mask)
            expect_mask[0] = 0
            assert b.loss_mask[r, pos].int().tolist() == expect_mask
            assert torch.allclose(b.inference_logprobs[r, pos], torch.tensor(samples[i].inference_logprobs))
            assert i not in seen
            seen.add(i)
        # padding carries no loss
        pad = [t for t in range(T) if ids[t] == -1]
        assert not b.loss_mask[r, pad].any()
    assert seen == set(range(len(samples)))
    # first-fit-decreasing needs no more rows than ceil(11/9 * OPT) + 1; OPT >= total / T
    total = sum(len(s) for s in samples)
    assert b.num_rows <= int(11 / 9 * -(-total // T)) + 1


def test_ffd_order_and_errors():
    assert first_fit_decreasing([5, 3, 4, 2], 7) == [[0, 3], [2, 1]]
    with pytest.raises(ValueError):
        first_fit_decreasing([8], 7)
    assert pack([], 8, min_rows=2).num_rows == 2


def test_forward_respects_sample_boundaries():
    from transformers import LlamaConfig, LlamaForCausalLM

    from verifiers.train.trainer import token_logprobs

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=48, hidden_size=64, num_attention_heads=1, num_key_value_heads=1,
                      num_hidden_layers=2, intermediate_size=128, max_position_embeddings=128)
    model = LlamaForCausalLM(cfg).eval()
    samples = rand_samples(6, seed=3, max_len=12)
    packed = pack(samples, 32)
    with torch.no_grad():
        lp, _ = token_logprobs(model, packed)
        for r in range(packed.num_rows):
            for i in set(packed.sample_ids[r].tolist()) - {-1}:
                sel = packed.sample_ids[r] == i
                alone = pack([samples[i]], len(samples[i]))
                lp1, _ = token_logprobs(model, alone)
                assert torch.allclose(lp[r][sel][1:], lp1[0][1:], atol=1e-5)
