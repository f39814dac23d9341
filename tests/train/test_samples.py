"""Rollouts -> samples: masks, logprob alignment, multi-turn merging/splitting, truncation."""

import pytest

from verifiers.train.advantages import group_advantages, has_signal
from verifiers.train.samples import (
    MissingTokenDataError,
    Sample,
    assign_advantage,
    rollout_to_samples,
    sample_metrics,
)


def step(prompt_ids, completion_ids, logprobs):
    return {"prompt": [], "completion": [], "response": {},
            "tokens": {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                       "completion_logprobs": logprobs}}


def tool_rollout(extend_exactly=True):
    # turn 1: prompt [1,2,3] -> model calls a tool [10,11]; tool result tokens [20,21] are env tokens;
    # turn 2: prompt = previous prompt + completion + tool tokens + template glue [30] -> answer [12,13].
    t1 = step([1, 2, 3], [10, 11], [-0.1, -0.2])
    p2 = [1, 2, 3, 10, 11, 20, 21, 30] if extend_exactly else [1, 2, 3, 99, 20, 21, 30]
    t2 = step(p2, [12, 13], [-0.3, -0.4])
    return {"reward": 1.0, "example_id": 7, "trajectory": [t1, t2]}


def test_multi_turn_tool_rollout_is_one_sample_with_env_tokens_masked():
    (s,) = rollout_to_samples(tool_rollout(), policy_version=3, env="tools")
    assert s.input_ids == [1, 2, 3, 10, 11, 20, 21, 30, 12, 13]
    assert s.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1, 1]
    assert s.inference_logprobs == [0, 0, 0, -0.1, -0.2, 0, 0, 0, -0.3, -0.4]
    assert s.reward == 1.0 and s.policy_version == 3 and s.env == "tools" and s.example_id == 7
    assert not s.truncated
    assert s.num_loss_tokens == 4


def test_turn_that_does_not_extend_previous_tokens_starts_a_new_sample():
    a, b = rollout_to_samples(tool_rollout(extend_exactly=False))
    assert a.input_ids == [1, 2, 3, 10, 11] and a.loss_mask == [0, 0, 0, 1, 1]
    assert b.input_ids == [1, 2, 3, 99, 20, 21, 30, 12, 13]
    assert b.loss_mask == [0] * 7 + [1, 1]
    assert b.inference_logprobs[-2:] == [-0.3, -0.4]


def test_a_split_is_counted_once_per_rollout():
    a, b = rollout_to_samples(tool_rollout(extend_exactly=False))
    assert (a.prefix_split, b.prefix_split) == (1, 0)
    assert sample_metrics([a, b]) == {"samples/extended": 0.0, "samples/split": 1.0}
    (s,) = rollout_to_samples(tool_rollout())
    assert s.prefix_split == 0 and Sample.from_dict(a.to_dict()).prefix_split == 1  # survives the exchange


def test_end_of_turn_glue_keeps_what_the_reply_already_ended_with():
    from verifiers.v1.prefix import glue

    close = [5, 9]  # the template's "<|im_end|>", "\n"
    assert glue([1, 2, 5], close, stopped=True) == [9]  # the reply stopped on <|im_end|>: only "\n" is added
    assert glue([1, 2, 3], close, stopped=True) == [5, 9]  # it stopped on another token (EOS)
    assert glue([1, 2, 5], close, stopped=False) == [5, 9]  # cut by max_tokens: a 5 it sampled is content
    assert glue([5, 9], close, stopped=True) == []


def test_truncation_is_marked():
    (s,) = rollout_to_samples(tool_rollout(), max_seq_len=6)
    assert s.truncated
    assert len(s.input_ids) == len(s.loss_mask) == len(s.inference_logprobs) == len(s.advantages) == 6
    assert s.loss_mask == [0, 0, 0, 1, 1, 0]


def test_rollout_flagged_truncated_by_env_stays_flagged():
    r = tool_rollout()
    r["is_truncated"] = True
    assert rollout_to_samples(r)[0].truncated


def test_missing_token_data_is_a_clear_error():
    with pytest.raises(MissingTokenDataError, match="return_token_ids"):
        rollout_to_samples({"reward": 0, "trajectory": [{"tokens": None}]})


def test_logprob_count_must_match_token_count():
    with pytest.raises(ValueError, match="logprobs"):
        rollout_to_samples({"reward": 0, "trajectory": [step([1], [2, 3], [-1.0])]})


def test_advantages_group_relative_and_filter():
    assert group_advantages([1.0, 0.0, 0.0, 1.0]) == [0.5, -0.5, -0.5, 0.5]
    adv = group_advantages([1.0, 0.0], normalize_std=True)
    assert adv[0] == pytest.approx(1.0, abs=1e-5) and adv[1] == pytest.approx(-1.0, abs=1e-5)
    assert not has_signal([0.3, 0.3, 0.3]) and has_signal([0.3, 0.2])
    (s,) = rollout_to_samples(tool_rollout())
    assign_advantage([s], 0.25)
    assert s.advantages == [0.25] * len(s)
