"""The loss against values computed by hand."""

import math

import pytest
import torch

from verifiers.train.loss import LossConfig, LossInputs, LossOutput, policy_loss, resolve_loss


def inputs(lp, inf, adv, mask, sample_ids=None, n=None, **kw):
    lp_t = torch.tensor([lp], dtype=torch.float64, requires_grad=True)
    mask_t = torch.tensor([mask], dtype=torch.bool)
    return lp_t, LossInputs(
        logprobs=lp_t, inference_logprobs=torch.tensor([inf], dtype=torch.float64),
        advantages=torch.tensor([adv], dtype=torch.float64), loss_mask=mask_t,
        sample_ids=torch.tensor([sample_ids or [0] * len(lp)]),
        num_loss_tokens=n if n is not None else float(sum(mask)), **kw)


def test_policy_loss_matches_hand_computation_with_band_masking():
    # token 0: prompt (mask 0). token 1: ratio e^0.1. token 2: ratio e^-1 = 0.37 < 0.5 -> masked low.
    # token 3: ratio e^2 = 7.39 > 5 -> masked high. token 4: ratio 1.
    lp = [0.0, -1.0, -2.0, -0.5, -0.3]
    inf = [0.0, -1.1, -1.0, -2.5, -0.3]
    adv = [0.5, 0.5, 0.5, 0.5, -1.0]
    mask = [0, 1, 1, 1, 1]
    lp_t, inp = inputs(lp, inf, adv, mask)
    out = policy_loss(inp, LossConfig())
    expected = -(math.exp(0.1) * 0.5 + 1.0 * -1.0) / 4
    assert float(out.loss.detach()) == pytest.approx(expected, rel=1e-9)
    out.loss.backward()
    # d loss / d lp_t = -ratio * A / N for kept tokens, 0 for masked ones.
    g = lp_t.grad[0].tolist()
    assert g[0] == 0 and g[2] == 0 and g[3] == 0
    assert g[1] == pytest.approx(-math.exp(0.1) * 0.5 / 4)
    assert g[4] == pytest.approx(1.0 / 4)
    assert out.stats["masked_low_sum"] == 1 and out.stats["masked_high_sum"] == 1
    assert out.stats["loss_tokens"] == 4
    # mismatch KL (k3) summed over loss tokens: sum(r - 1 - log r)
    lr_ = [0.1, -1.0, 2.0, 0.0]
    assert out.stats["mismatch_kl_sum"] == pytest.approx(sum(math.exp(x) - 1 - x for x in lr_))


def test_normalised_by_total_loss_tokens_of_the_step():
    _, inp = inputs([0.0, -1.0], [0.0, -1.0], [1.0, 1.0], [0, 1], n=10.0)
    assert float(policy_loss(inp, LossConfig()).loss) == pytest.approx(-1.0 / 10)


def test_sequence_mask_drops_whole_sequence():
    # sample 0 tokens: log ratios 0.6 and 0.6 -> geometric mean e^0.6 = 1.82 < 2 kept.
    # sample 1 tokens: log ratios 1.0, 1.0 -> e^1 = 2.72 > 2 -> whole sequence masked.
    lp = [0.0, -0.4, -0.4, 0.0, 0.0, 0.0]
    inf = [0.0, -1.0, -1.0, 0.0, -1.0, -1.0]
    adv = [1.0] * 6
    mask = [0, 1, 1, 0, 1, 1]
    sid = [0, 0, 0, 1, 1, 1]
    _, inp = inputs(lp, inf, adv, mask, sample_ids=sid)
    out = policy_loss(inp, LossConfig(sequence_mask=True))
    assert out.stats["masked_seq_sum"] == 2
    assert float(out.loss) == pytest.approx(-(2 * math.exp(0.6)) / 4)
    out_nomask = policy_loss(inp, LossConfig())
    assert float(out_nomask.loss) == pytest.approx(-(2 * math.exp(0.6) + 2 * math.e) / 4)


def test_kl_term_k3_against_reference():
    lp = [0.0, -1.0]
    _, inp = inputs(lp, lp, [0.0, 0.0], [0, 1], ref_logprobs=torch.tensor([[0.0, -1.5]], dtype=torch.float64))
    out = policy_loss(inp, LossConfig(kl_coef=0.1))
    d = -1.5 - -1.0
    assert float(out.loss) == pytest.approx(0.1 * (math.exp(d) - d - 1))


def test_entropy_diagnostic_and_custom_hook(tmp_path, monkeypatch):
    _, inp = inputs([0.0, -1.0], [0.0, -1.0], [1.0, 1.0], [0, 1],
                    entropy=torch.tensor([[9.0, 2.0]], dtype=torch.float64))
    assert policy_loss(inp, LossConfig()).stats["entropy_sum"] == 2.0
    mod = tmp_path / "my_loss_mod.py"
    mod.write_text(
        "from verifiers.train.loss import LossOutput\n"
        "def loss(inp, cfg):\n"
        "    return LossOutput(loss=(inp.logprobs * inp.loss_mask).sum() * 0 + 42.0, stats={'custom': 1.0})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fn = resolve_loss(LossConfig(custom="my_loss_mod:loss"))
    out = fn(inp, LossConfig())
    assert isinstance(out, LossOutput) and float(out.loss) == 42.0
    assert resolve_loss(LossConfig()) is policy_loss
    with pytest.raises(ValueError):
        resolve_loss(LossConfig(custom="no_colon"))


def test_kl_only_on_kept_loss_tokens_with_several_in_band_tokens():
    """Several in-band tokens, prompt tokens (mask 0) where the reference disagrees strongly, and a
    token masked by the ratio band: the KL term sums over the kept loss tokens only. A KL applied to
    masked tokens (or to every token) gives another value and fails this."""
    lp = [-0.2, -1.0, -0.7, -1.3, -0.4, -2.0, -0.9]
    inf = [0.0, -1.1, -0.6, -1.2, -0.4, -0.5, -0.9]    # token 5: ratio e^-1.5 = 0.22 < 0.5 -> masked
    ref = [-3.0, -1.4, -0.2, -1.0, -0.9, -0.1, -4.0]   # large disagreement on the prompt tokens 0 and 6
    mask = [0, 1, 1, 1, 1, 1, 0]
    adv = [0.7] * 7
    coef = 0.3
    _, inp = inputs(lp, inf, adv, mask, ref_logprobs=torch.tensor([ref], dtype=torch.float64))
    out = policy_loss(inp, LossConfig(kl_coef=coef))
    kept = [1, 2, 3, 4]
    n = 5  # loss tokens (the band-masked one counts in N, like in the policy term)

    def k3(t):
        d = ref[t] - lp[t]
        return math.exp(d) - d - 1

    pg = -sum(math.exp(lp[t] - inf[t]) * adv[t] for t in kept) / n
    expected = pg + coef * sum(k3(t) for t in kept) / n
    assert float(out.loss) == pytest.approx(expected, rel=1e-9)
    # the wrong variants are far from it
    on_all_loss_tokens = pg + coef * sum(k3(t) for t in (1, 2, 3, 4, 5)) / n
    on_every_token = pg + coef * sum(k3(t) for t in range(7)) / n
    assert abs(expected - on_all_loss_tokens) > 1e-3 and abs(expected - on_every_token) > 1e-2
    assert out.stats["kl_ref_sum"] == pytest.approx(sum(k3(t) for t in (1, 2, 3, 4, 5)))


def _exp(x: float) -> float:
    """exp(x) as the loss computes it (torch, float64), so a band edge equals a token's ratio exactly."""
    return float(torch.exp(torch.tensor(x, dtype=torch.float64)))


def test_ratios_exactly_at_the_band_edges_are_kept_and_just_outside_are_masked():
    # The band is closed: keep(t) needs low <= r(t) <= high. Tokens 1 and 2 sit exactly on the
    # edges (kept), tokens 3 and 4 a hair (1e-12 in log space) outside them (masked), token 0 in the middle.
    low, high = _exp(-0.5), _exp(0.7)
    lp = [0.0, -0.5, 0.7, -0.5 - 1e-12, 0.7 + 1e-12]
    inf = [0.0] * 5
    adv = [1.0, 2.0, 4.0, 8.0, 16.0]
    lp_t, inp = inputs(lp, inf, adv, [1] * 5)
    out = policy_loss(inp, LossConfig(ratio_low=low, ratio_high=high))
    assert out.stats["masked_low_sum"] == 1 and out.stats["masked_high_sum"] == 1
    assert float(out.loss.detach()) == pytest.approx(-(1.0 * 1.0 + low * 2.0 + high * 4.0) / 5, rel=1e-12)
    out.loss.backward()
    g = lp_t.grad[0].tolist()
    assert g[3] == 0 and g[4] == 0
    assert g[1] == pytest.approx(-low * 2.0 / 5) and g[2] == pytest.approx(-high * 4.0 / 5)


def test_sequence_ratios_exactly_at_the_band_edges_are_kept():
    # One-token sequences: the sequence's geometric-mean ratio is its token's ratio.
    low, high = _exp(-0.3), _exp(0.4)
    lp = [-0.3, 0.4, -0.3 - 1e-12, 0.4 + 1e-12]
    _lp_t, inp = inputs(lp, [0.0] * 4, [1.0] * 4, [1] * 4, sample_ids=[0, 1, 2, 3])
    cfg = LossConfig(ratio_low=0.1, ratio_high=10.0, sequence_mask=True, seq_ratio_low=low, seq_ratio_high=high)
    out = policy_loss(inp, cfg)
    assert out.stats["masked_seq_sum"] == 2 and out.stats["masked_low_sum"] == 0
    assert float(out.loss.detach()) == pytest.approx(-(low + high) / 4, rel=1e-12)
