"""Rollouts -> token-level training samples.

Samples are built from the token data the inference server returned for every turn
(``trajectory[i]["tokens"]``); sampled text is never re-tokenised, because a second tokenisation can
differ from what the policy actually emitted and would silently train on tokens it never produced.

A multi-turn rollout becomes ONE sample when each turn's prompt ids start with the previous turn's
prompt + completion ids (the usual case with a chat template that renders history verbatim); tokens
between turns (environment / tool messages, template glue) get loss mask 0. When a turn does not
extend the previous tokens exactly (e.g. the template drops earlier reasoning), the rollout is split
into several samples, each starting from that turn's full prompt.

A v1 rollout (an episode, ``state["episode"]``) needs no merging: its traces already hold the
message graph with each node's token ids, sampled-token mask and logprobs as the server returned
them (``verifiers.v1.trace.Trace.commit_turn``), and every trainable root-to-leaf branch of every
trainable agent's trace is one sample (a prefix break already starts a new branch there). An
episode played by an env server arrives as a ``WireEpisode`` (or its record, a dict) assembled
from the streamed trace deltas; :func:`episode_samples` makes the same samples from it as from
the in-process episode, id for id.

Every split is counted, never silent: ``Sample.prefix_split`` / ``prefix_extended`` (on the first
sample of each rollout or trace) carry the turns whose tokens broke the conversation's, and the
turns whose prompt ids the interception layer made extend it (``verifiers.v1.prefix``);
:func:`sample_metrics` sums them per batch (``samples/split``, ``samples/extended``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Sample:
    """One training sequence; every per-token list has the same length as ``input_ids``.

    ``loss_mask[t] == 1`` only for tokens the policy sampled. ``inference_logprobs[t]`` is the
    sampler's log-probability of ``input_ids[t]`` (0.0 where the mask is 0). ``advantages`` holds the
    group-relative advantage broadcast to every token (0.0 until :func:`assign_advantage`).
    """

    input_ids: list[int]
    loss_mask: list[int]
    inference_logprobs: list[float]
    advantages: list[float] = field(default_factory=list)
    reward: float = 0.0
    truncated: bool = False
    policy_version: int = 0
    env: str = ""
    example_id: Any = None
    group_id: int = -1
    prefix_extended: int = 0
    """Turns of this sample's rollout whose prompt ids were made to extend the previous tokens
    (counted on the first sample of a trace / rollout only, so a batch's sum counts each turn once)."""
    prefix_split: int = 0
    """Turns whose prompt tokens did not extend the previous turn's: the rollout split there."""

    def __post_init__(self) -> None:
        if not self.advantages:
            self.advantages = [0.0] * len(self.input_ids)
        n = len(self.input_ids)
        if not (len(self.loss_mask) == len(self.inference_logprobs) == len(self.advantages) == n):
            raise ValueError("per-token lists of a Sample must all have the length of input_ids")

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Sample:
        return cls(**dict(d))


class MissingTokenDataError(ValueError):
    """A trajectory step has no token data: the sampling args did not request it from the server."""


NO_TOKENS_HINT = ('sample with {"logprobs": true, "extra_body": {"return_token_ids": true}} against vLLM '
                  "(vf train sends both; a role's own client or a server that drops them does not)")


def _get(obj: Any, key: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _step_tokens(step: Any) -> tuple[list[int], list[int], list[float]]:
    tokens = _get(step, "tokens")
    if not tokens:
        raise MissingTokenDataError(
            f"trajectory step carries no token data; {NO_TOKENS_HINT}")
    prompt_ids = list(_get(tokens, "prompt_ids") or [])
    completion_ids = list(_get(tokens, "completion_ids") or [])
    logprobs = [float(x) for x in (_get(tokens, "completion_logprobs") or [])]
    if len(logprobs) != len(completion_ids):
        raise ValueError(
            f"completion has {len(completion_ids)} token ids but {len(logprobs)} logprobs"
        )
    return prompt_ids, completion_ids, logprobs


def rollout_to_samples(
    state: Mapping[str, Any] | Any,
    *,
    max_seq_len: int | None = None,
    policy_version: int = 0,
    env: str = "",
) -> list[Sample]:
    """Turn one scored rollout (a State / output record with a token-carrying trajectory) into samples.

    Sequences longer than ``max_seq_len`` are cut and flagged ``truncated`` (never silently dropped);
    a sample left with no sampled token after the cut is returned with an all-zero mask so callers can
    count it. ``reward`` is the rollout's reward; advantages are assigned later, per group.
    """
    reward = float(_get(state, "reward") or 0.0)
    example_id = _get(state, "example_id")
    episode = _get(state, "episode")
    if episode is not None:
        return episode_samples(episode, reward=reward, example_id=example_id, max_seq_len=max_seq_len,
                               policy_version=policy_version, env=env)
    trajectory = _get(state, "trajectory") or []
    rollout_truncated = bool(_get(state, "is_truncated"))
    samples: list[Sample] = []
    ids: list[int] = []
    mask: list[int] = []
    lps: list[float] = []

    def close() -> None:
        if ids:
            samples.append(
                Sample(list(ids), list(mask), list(lps), reward=reward, policy_version=policy_version,
                       env=env, example_id=example_id, truncated=rollout_truncated)
            )

    splits = 0
    for step in trajectory:
        prompt_ids, completion_ids, logprobs = _step_tokens(step)
        if ids and len(prompt_ids) >= len(ids) and prompt_ids[: len(ids)] == ids:
            new_prompt = prompt_ids[len(ids):]
        else:
            # Not an exact extension (or the first turn): start a new sample from the full prompt.
            splits += 1 if ids else 0
            close()
            ids, mask, lps = [], [], []
            new_prompt = prompt_ids
        ids.extend(new_prompt)
        mask.extend([0] * len(new_prompt))
        lps.extend([0.0] * len(new_prompt))
        ids.extend(completion_ids)
        mask.extend([1] * len(completion_ids))
        lps.extend(logprobs)
    close()
    if samples:
        samples[0].prefix_split = splits
    return _cut(samples, max_seq_len)


def _cut(samples: list[Sample], max_seq_len: int | None) -> list[Sample]:
    """Sequences longer than ``max_seq_len`` cut and flagged ``truncated``."""
    if max_seq_len is not None:
        for s in samples:
            if len(s.input_ids) > max_seq_len:
                s.input_ids = s.input_ids[:max_seq_len]
                s.loss_mask = s.loss_mask[:max_seq_len]
                s.inference_logprobs = s.inference_logprobs[:max_seq_len]
                s.advantages = s.advantages[:max_seq_len]
                s.truncated = True
    return samples


def trace_samples(
    trace: Any,
    *,
    reward: float = 0.0,
    example_id: Any = None,
    max_seq_len: int | None = None,
    policy_version: int = 0,
    env: str = "",
) -> list[Sample]:
    """One sample per trainable branch of a v1 trace (``verifiers.v1.Trace``) that holds a model reply.

    ``input_ids`` is the branch's ``token_ids``; ``loss_mask`` is 1 exactly on the tokens the model
    sampled (user, tool and template tokens between turns are 0); ``inference_logprobs`` are the
    server's logprobs of those tokens. A reply recorded without token ids or logprobs raises
    :class:`MissingTokenDataError`: its text is never tokenised again.
    """
    samples: list[Sample] = []
    for branch in trace.branches:
        if not branch.trainable or not any(n.sampled for n in branch.nodes):
            continue
        for n in branch.nodes:
            if len(n.mask) != len(n.token_ids):
                raise ValueError(f"trace {trace.id}: a node has {len(n.token_ids)} token ids but {len(n.mask)} mask entries")
            sampled = sum(n.mask)
            if n.sampled and not sampled:
                raise MissingTokenDataError(
                    f"trace {trace.id} (agent {trace.agent.name!r}): a model reply was recorded without token ids; "
                    f"{NO_TOKENS_HINT}")
            if len(n.logprobs) != sampled:
                raise MissingTokenDataError(
                    f"trace {trace.id} (agent {trace.agent.name!r}): a model reply has {sampled} sampled tokens "
                    f"but {len(n.logprobs)} logprobs; {NO_TOKENS_HINT}")
        ids = list(branch.token_ids)
        samples.append(Sample(ids, [int(m) for m in branch.sampled_mask], list(branch.logprobs), reward=reward,
                              truncated=bool(trace.is_truncated), policy_version=policy_version, env=env,
                              example_id=example_id))
    if samples:
        from verifiers.v1.trace import TOKEN_PREFIX_KEY

        counts = trace.info.get(TOKEN_PREFIX_KEY)
        counts = counts if isinstance(counts, Mapping) else {}
        samples[0].prefix_extended = int(counts.get("extended") or 0)
        samples[0].prefix_split = int(counts.get("split") or 0)
    return _cut(samples, max_seq_len)


def episode_samples(episode: Any, **kwargs: Any) -> list[Sample]:
    """The samples of a v1 episode: those of each trainable agent's trace (:func:`trace_samples`),
    all with the episode's reward (advantages are per episode, over the group of one task).

    ``episode`` is an in-process ``Episode``, a ``WireEpisode`` an ``EnvClient`` assembled from a
    served run, or either's record (a dict, validated as a ``WireEpisode``): the same samples.
    Keywords: those of :func:`trace_samples` (``reward``, ``example_id``, ``max_seq_len``,
    ``policy_version``, ``env``)."""
    if isinstance(episode, Mapping):
        from verifiers.v1.episode import WireEpisode

        episode = WireEpisode.model_validate(episode)
    out: list[Sample] = []
    for trace in episode.traces:
        if trace.agent.trainable:
            out.extend(trace_samples(trace, **kwargs))
    return out


def sample_metrics(samples: Sequence[Sample]) -> dict[str, float]:
    """A batch's token-prefix counts: ``samples/extended`` (turns whose prompt ids were made to
    extend the previous tokens) and ``samples/split`` (turns whose tokens broke them, so their
    rollout trained as several samples)."""
    return {
        "samples/extended": float(sum(s.prefix_extended for s in samples)),
        "samples/split": float(sum(s.prefix_split for s in samples)),
    }


def assign_advantage(samples: Sequence[Sample], advantage: float) -> None:
    """Broadcast a rollout's advantage to every token of its samples (masked tokens carry it too;
    the loss mask decides what trains)."""
    for s in samples:
        s.advantages = [float(advantage)] * len(s.input_ids)
