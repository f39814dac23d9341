"""The policy-gradient loss: token-level importance sampling with ratio masking.

Notation per token t of a packed batch (shapes ``(B, T)``):
    pi_theta(t)  trainer log-probability of the sampled token (with gradient)
    mu(t)        inference (vLLM) log-probability of the same token, recorded at sampling time
    A(t)         group-relative advantage of the rollout the token belongs to
    m(t)         loss mask: 1 only for sampled tokens

    r(t)      = exp(pi_theta(t) - mu(t))                               importance ratio
    keep(t)   = m(t) * [low <= r(t) <= high] * seq_keep(s(t))         ratio masking (not clipping)
    L_policy  = - sum_t keep(t) * r(t) * A(t) / N,   N = sum_t m(t)   (normalised by loss tokens)
    L         = L_policy + beta * sum_t keep(t) * KL_k3(t) / N         (optional KL to a reference)

Masking instead of clipping follows the seed's recipe (INTELLECT-3, arXiv 2512.16144; also "IcePop",
arXiv 2510.18855): tokens whose trainer/inference ratio left the band [0.5, 5] are dropped from the
gradient entirely, because their inference logprobs no longer describe the trainer's policy.
The optional sequence mask drops a whole sequence when its geometric-mean ratio
exp(mean_t (pi_theta - mu)) leaves [seq_low, seq_high].
KL_k3 is Schulman's unbiased, non-negative estimator, http://joschu.net/blog/kl-approx.html:
    KL_k3 = exp(ref - pi) - (ref - pi) - 1.

A custom loss may replace :func:`policy_loss` (``loss.custom = "pkg.module:function"``); it gets
the same :class:`LossInputs` and :class:`LossConfig` and returns a :class:`LossOutput`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from pydantic import BaseModel, ConfigDict


class LossConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a typo in a TOML key is an error, not a no-op

    ratio_low: float = 0.5
    ratio_high: float = 5.0
    sequence_mask: bool = False
    seq_ratio_low: float = 0.5
    seq_ratio_high: float = 2.0
    kl_coef: float = 0.0
    custom: str | None = None  # "module:function" with the signature of policy_loss


@dataclass
class LossInputs:
    logprobs: torch.Tensor              # (B, T) trainer log-probs of the taken tokens, with grad
    inference_logprobs: torch.Tensor    # (B, T) sampler log-probs of the same tokens
    advantages: torch.Tensor            # (B, T)
    loss_mask: torch.Tensor             # (B, T) bool, sampled tokens
    sample_ids: torch.Tensor            # (B, T) long, global sample index per token, -1 on padding
    num_loss_tokens: float              # N: loss tokens of the WHOLE step (all micro-batches, ranks)
    entropy: torch.Tensor | None = None      # (B, T) trainer entropy per position, no grad
    ref_logprobs: torch.Tensor | None = None  # (B, T) reference-model log-probs for the KL term


@dataclass
class LossOutput:
    loss: torch.Tensor                   # scalar, to backward()
    # Sums over this micro-batch (divide by total loss tokens for means); floats, no grad.
    stats: dict[str, float] = field(default_factory=dict)


def _sequence_keep(log_ratio: torch.Tensor, mask: torch.Tensor, sample_ids: torch.Tensor,
                   low: float, high: float) -> torch.Tensor:
    """(B, T) bool: False on every token of a sequence whose geometric-mean ratio is outside [low, high]."""
    ids = torch.where(mask, sample_ids, torch.zeros_like(sample_ids)).flatten()   # (B*T,)
    n = int(sample_ids.max().item()) + 1 if sample_ids.numel() else 0
    m = mask.flatten().to(log_ratio.dtype)                                       # (B*T,)
    sums = torch.zeros(max(n, 1), dtype=log_ratio.dtype, device=log_ratio.device)
    cnts = torch.zeros_like(sums)
    sums.index_add_(0, ids, log_ratio.detach().flatten() * m)                    # (S,)
    cnts.index_add_(0, ids, m)                                                   # (S,)
    seq_ratio = torch.exp(sums / cnts.clamp(min=1))                              # (S,)
    seq_ok = (seq_ratio >= low) & (seq_ratio <= high)                            # (S,)
    return seq_ok[sample_ids.clamp(min=0)] | (sample_ids < 0)                    # (B, T)


def policy_loss(inp: LossInputs, cfg: LossConfig) -> LossOutput:
    """The default loss (see the module docstring for the equations)."""
    mask = inp.loss_mask.bool()                                           # (B, T)
    log_ratio = inp.logprobs - inp.inference_logprobs                     # (B, T)
    log_ratio = torch.where(mask, log_ratio, torch.zeros_like(log_ratio))
    ratio = torch.exp(log_ratio)                                          # (B, T), grad flows via logprobs
    r = ratio.detach()
    low = mask & (r < cfg.ratio_low)                                      # (B, T)
    high = mask & (r > cfg.ratio_high)                                    # (B, T)
    keep = mask & ~low & ~high                                            # (B, T)
    seq_masked = torch.zeros_like(mask)
    if cfg.sequence_mask:
        seq_keep = _sequence_keep(log_ratio, mask, inp.sample_ids, cfg.seq_ratio_low, cfg.seq_ratio_high)
        seq_masked = mask & ~seq_keep
        keep = keep & seq_keep
    keepf = keep.to(ratio.dtype)
    n = max(float(inp.num_loss_tokens), 1.0)
    pg = -(ratio * inp.advantages * keepf).sum() / n                      # scalar
    loss = pg
    stats: dict[str, float] = {}
    if inp.ref_logprobs is not None and cfg.kl_coef:
        d = inp.ref_logprobs - inp.logprobs                               # (B, T)
        kl = torch.exp(d) - d - 1.0                                       # (B, T), k3 >= 0
        kl_term = (kl * keepf).sum() / n
        loss = loss + cfg.kl_coef * kl_term
        stats["kl_ref_sum"] = float((kl.detach() * mask).sum())
    # Mismatch KL(mu || pi_theta) on sampled tokens, k3 estimator with log(pi/mu) = log_ratio.
    mismatch = (r - 1.0) - log_ratio.detach()                             # (B, T) >= 0
    stats.update(
        loss_tokens=float(mask.sum()),
        policy_loss_sum=float(pg.detach()) * n,
        mismatch_kl_sum=float((mismatch * mask).sum()),
        masked_low_sum=float(low.sum()),
        masked_high_sum=float(high.sum()),
        masked_seq_sum=float(seq_masked.sum()),
        ratio_sum=float((r * mask).sum()),
    )
    if inp.entropy is not None:
        stats["entropy_sum"] = float((inp.entropy.detach() * mask).sum())
    return LossOutput(loss=loss, stats=stats)


LossFn = Callable[[LossInputs, LossConfig], LossOutput]


def resolve_loss(cfg: LossConfig) -> LossFn:
    """The default loss, or the custom one named ``module:function`` (the custom-loss hook)."""
    if not cfg.custom:
        return policy_loss
    mod_name, _, attr = cfg.custom.partition(":")
    if not attr:
        raise ValueError(f"loss.custom must look like 'module:function', got {cfg.custom!r}")
    fn = getattr(importlib.import_module(mod_name), attr)
    if not callable(fn):
        raise TypeError(f"{cfg.custom} is not callable")
    return fn
