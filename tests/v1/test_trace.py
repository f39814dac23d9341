"""Traces: the message graph and its token data, the views environments read, episodes and deltas."""

from __future__ import annotations

import asyncio
import json

import pydantic
import pytest

import verifiers.v1 as vf
from verifiers.v1.wire import DeltaStreamer, EpisodeAssembly, TraceSummary, dump, pack, unpack


def _reply(content: str, prompt_ids: list[int], completion_ids: list[int], **kw) -> vf.Response:
    return vf.Response(
        id="r", created=0, model="tiny", message=vf.AssistantMessage(content=content, **kw), finish_reason="stop",
        usage=vf.Usage(prompt_tokens=len(prompt_ids), completion_tokens=len(completion_ids)),
        tokens=vf.TurnTokens(prompt_ids=prompt_ids, completion_ids=completion_ids, completion_logprobs=[-0.5] * len(completion_ids)),
    )  # fmt: skip


def build_trace() -> vf.Trace:
    """Two turns with a tool call, then a rewritten history (a second branch)."""
    task = vf.Task(vf.WireTaskData(prompt="what is 2+2?", answer="4"))
    trace = vf.Trace.for_task(task)
    tools = [vf.Tool(name="calc", description="adds", parameters={"type": "object"})]
    system, user = vf.SystemMessage(content="be brief"), vf.UserMessage(content="what is 2+2?")
    call = vf.ToolCall(id="c1", name="calc", arguments='{"a": 2}')
    trace.commit_turn([system, user], _reply("", [1, 2, 3], [4, 5], tool_calls=[call]), tools=tools)
    tool = vf.ToolMessage(tool_call_id="c1", content="4", name="calc")
    first = trace.nodes[2].message
    trace.commit_turn([system, user, first, tool], _reply("4 done", [1, 2, 3, 4, 5, 6, 7], [8, 9]), tools=tools)
    # a compacted history: its tokens do not extend the first branch, so it is its own path
    trace.commit_turn([vf.UserMessage(content="summary: 4")], _reply("4", [20, 21], [22]))
    trace.record_reward("correct", 1.0, weight=2.0)
    trace.record_metric("turns", trace.num_turns)
    trace.info["note"] = "ok"
    trace.ok = True
    trace.stop("agent_completed")
    return trace


def test_the_graph_keeps_each_message_once_and_tokens_per_branch() -> None:
    trace = build_trace()
    assert [n.parent for n in trace.nodes] == [None, 0, 1, 2, 3, None, 5]
    first, second = trace.branches
    assert first.token_ids == [1, 2, 3, 4, 5, 6, 7, 8, 9]  # exactly prompt_ids + completion_ids of its last call
    assert first.sampled_mask == [False] * 3 + [True] * 2 + [False] * 2 + [True] * 2
    assert first.logprobs == [0.0] * 3 + [-0.5] * 2 + [0.0] * 2 + [-0.5] * 2
    assert second.token_ids == [20, 21, 22] and [c.node for c in first.calls] == [2, 4]
    assert trace.nodes[0].tools[0].name == "calc" and trace.nodes[1].tools == [] and trace.tools[0].name == "calc"
    assert trace.num_turns == 3 and trace.num_branches == 2


def test_a_turns_tools_replace_the_traces_by_namespace_and_name_the_last_one_winning() -> None:
    trace = vf.Trace.for_task(vf.Task(vf.WireTaskData(prompt="p")))
    user = vf.UserMessage(content="p")
    old = [vf.Tool(name="keep"), vf.Tool(name="calc", description="old"), vf.Tool(name="calc", namespace="ns")]
    trace.commit_turn([user], _reply("a", [1], [2]), tools=old)
    assert [(t.namespace, t.name, t.description) for t in trace.tools] == [(None, "keep", ""), (None, "calc", "old"), ("ns", "calc", "")]
    new = [vf.Tool(name="calc", description="first"), vf.Tool(name="add"), vf.Tool(name="calc", description="second")]
    trace.commit_turn([vf.UserMessage(content="q")], _reply("b", [3], [4]), tools=new)
    # each tool in turn replaces its (namespace, name) and goes last: a repeated one ends where it was last given
    assert [(t.namespace, t.name, t.description) for t in trace.tools] == [
        (None, "keep", ""), ("ns", "calc", ""), (None, "add", ""), (None, "calc", "second"),
    ]  # fmt: skip


def test_the_views_environments_read() -> None:
    trace = build_trace()
    assert trace.last_reply == "4"
    assert [m.content for m in trace.assistant_messages] == ["", "4 done", "4"]
    assert [m.content for m in trace.tool_messages] == ["4"]
    assert trace.reward == 2.0 and trace.metrics == {"turns": 3.0} and trace.stop_condition == "agent_completed"
    assert trace.transcript == "[user]\nsummary: 4\n\n[assistant]\n4"
    whole = vf.Trace(task=trace.task, nodes=trace.nodes[:5])
    assert whole.transcript == (
        "[system]\nbe brief\n\n[user]\nwhat is 2+2?\n\n[assistant]\n[tool_call calc({\"a\": 2})]\n\n[tool calc]\n4\n\n[assistant]\n4 done"
    )
    assert trace.num_output_tokens == 5 and trace.usage.prompt_tokens == 12
    trace.stop("later")  # the first stop condition stays
    assert trace.stop_condition == "agent_completed"


def test_a_record_reads_back_as_the_same_trace() -> None:
    trace = build_trace()
    record = trace.to_record()
    again = vf.WireTrace.model_validate(record)
    assert again.task.data.model_extra == {"answer": "4"} and again.rewards == trace.rewards
    assert again.to_record() == record
    assert unpack(pack(vf.WireTrace.model_validate(unpack(pack(trace.model_dump(mode="python")))).model_dump(mode="python")))["id"] == trace.id


def test_an_episode_is_its_traces_and_their_totals() -> None:
    trace = build_trace()
    episode = vf.Episode(task=trace.task, traces=[trace, build_trace()], ok=True)
    assert episode.num_turns == 6 and episode.num_output_tokens == 10
    record = episode.to_record()
    wire = vf.WireEpisode.model_validate(record)
    assert [t.id for t in wire.traces] == [t.id for t in episode.traces]
    # a node's raw tensors stay off the JSON record (msgpack wire only); the rest is unchanged
    episode.traces[1].nodes[2].routed_experts = {"__nd__": True, "dtype": "uint8", "shape": [2, 1, 1], "data": "AAE="}
    episode.traces[0].nodes[4].sampling_mask = {"ids": [1], "counts": [1]}
    assert episode.to_record() == record
    assert "routed_experts" not in json.dumps(record) and "sampling_mask" not in json.dumps(record)


def test_deltas_rebuild_the_trace_the_worker_holds() -> None:
    trace_a, trace_b = build_trace(), build_trace()
    live = [trace_a]
    assembly = EpisodeAssembly()
    sent: list[dict] = []

    async def send(delta: dict) -> None:
        delta = unpack(pack(delta))  # as it crosses the wire
        sent.append(delta)
        assembly.apply(delta)

    async def go() -> None:
        async with DeltaStreamer(lambda: live, send) as streamer:
            streamer.watch(trace_a)
            await streamer.flush()
            trace_a.commit_turn([vf.UserMessage(content="again")], _reply("x", [30], [31]))
            trace_a.nodes[4].semantic_parents.append(vf.ParentLink(node=0, type="subagent_return"))
            trace_a.record_reward("extra", 0.5)
            live.append(trace_b)
            streamer.watch(trace_b)

    asyncio.run(go())
    assert "open" in sent[0] and "open" not in sent[1] and sent[1]["nodes"][0]["message"]["content"] == "again"
    assert set(sent[1]) <= {"trace", "nodes", "calls", "links", "set"}  # only what changed
    head = vf.Episode(task=trace_a.task).model_dump(mode="python", exclude={"traces"})
    record = assembly.finish(head, [TraceSummary(id=t.id, nodes=len(t.nodes), calls=len(t.calls)) for t in live])
    episode = vf.WireEpisode.model_validate(record)
    assert episode.traces[0].to_record() == vf.WireTrace.model_validate(dump(trace_a)).to_record()
    assert episode.traces[0].nodes[4].semantic_parents[0].type == "subagent_return"
    assert episode.traces[1].rewards == trace_b.rewards


def test_semantic_edges_link_the_calls_an_acp_harness_names() -> None:
    trace = build_trace()
    trace.calls[0].acp = vf.ACPInfo(request_id="req-1")
    trace.calls[2].acp = vf.ACPInfo(request_id="req-3")
    edges = vf.SemanticEdgeSet(edges=[{"source_request_id": "req-3", "target_request_id": "req-1", "type": "subagent_return"}])
    trace.add_semantic_edges(edges)
    trace.add_semantic_edges(edges)  # a replay changes nothing
    assert trace.nodes[2].semantic_parents == [vf.ParentLink(node=6, type="subagent_return")]
    unknown = vf.SemanticEdgeSet(edges=[{"source_request_id": "req-9", "target_request_id": "req-1", "type": "x"}])
    with pytest.raises(ValueError, match="'req-9' has no committed message node"):
        trace.add_semantic_edges(unknown)
    with pytest.raises(pydantic.ValidationError, match="cannot link a request to itself"):
        vf.SemanticEdgeSet(edges=[{"source_request_id": "a", "target_request_id": "a", "type": "x"}])


def test_hostile_records_get_one_clear_error() -> None:
    record = build_trace().to_record()
    record["nodes"][0]["parent"] = 4  # a cycle: refused, never walked
    with pytest.raises(pydantic.ValidationError, match="node 0's parent 4 is not an earlier node"):
        vf.WireTrace.model_validate(record)
    with pytest.raises(pydantic.ValidationError, match="a model call points at node 99"):
        vf.WireTrace.model_validate({**build_trace().to_record(), "calls": [{"node": 99}]})
    with pytest.raises(pydantic.ValidationError):
        vf.WireTrace.model_validate({**record, "nodes": "not a list"})
    assembly = EpisodeAssembly()
    with pytest.raises(ValueError, match="before its header"):
        assembly.apply({"trace": "t1", "nodes": []})
    assembly.apply({"trace": "t1", "open": {"id": "t1"}})
    with pytest.raises(RuntimeError, match="assembled 0 nodes / 0 calls, server reports 2 / 1"):
        assembly.finish({}, [TraceSummary(id="t1", nodes=2, calls=1)])
    with pytest.raises(RuntimeError, match="missing trace t2"):
        assembly.finish({}, [TraceSummary(id="t2", nodes=0, calls=0)])


def test_a_failed_send_is_diffed_again_and_a_dropped_trace_discarded(caplog) -> None:
    trace, other = build_trace(), build_trace()
    live = [trace, other]
    sent: list[dict] = []
    fail = [True]

    async def send(delta: dict) -> None:
        if fail[0] and delta["trace"] == trace.id:
            fail[0] = False
            raise ConnectionError("peer gone for a moment")
        sent.append(delta)

    async def go() -> None:
        streamer = DeltaStreamer(lambda: live, send)
        await streamer.flush()  # trace's delta fails, other's goes
        await streamer.flush()  # trace's whole delta again
        live.remove(other)
        await streamer.flush()

    with caplog.at_level("WARNING", logger="verifiers.v1.wire"):
        asyncio.run(go())
    # a pool gone mid-run made each failed send print a traceback; now one line says what failed
    (record,) = [r for r in caplog.records if "failed to send the delta" in r.getMessage()]
    assert record.exc_info is None and "ConnectionError: peer gone for a moment" in record.getMessage()
    assert [d["trace"] for d in sent] == [other.id, trace.id, other.id]
    assert "open" in sent[1] and len(sent[1]["nodes"]) == len(trace.nodes) and sent[2] == {"trace": other.id, "discard": True}


def test_usage_from_an_openai_response() -> None:
    usage = vf.Usage.from_openai({"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}})
    assert (usage.prompt_tokens, usage.cached_input_tokens, usage.input_tokens, usage.total_tokens) == (6, 4, 10, 13)
    total = vf.Usage.aggregate([usage, vf.Usage(prompt_tokens=1, completion_tokens=1)])
    assert (total.prompt_tokens, total.cached_input_tokens, total.reasoning_tokens) == (7, 4, None)


def test_a_trace_carries_the_state_class_its_task_declares_and_never_serializes_it() -> None:
    class Counter(vf.State):
        calls: int = 0

    class Counted(vf.Task[vf.TaskData, Counter]):
        @vf.metric
        def seen(self, state: Counter) -> float:
            state.calls += 1
            return state.calls

    task = Counted(vf.TaskData(prompt="p"))
    trace = vf.Trace[vf.TaskData, Counter].for_task(task)
    assert type(trace.state) is Counter
    asyncio.run(task.score(trace))
    assert trace.metrics == {"seen": 1.0} and trace.state.calls == 1
    assert "state" not in trace.to_record()


def test_token_counts_follow_each_new_turn_and_agree_with_the_branches() -> None:
    """The counts a record carries are read from the branches' calls; each new turn (and a
    replaced call list) changes them as the Branch models say."""
    task = vf.Task(vf.WireTaskData(prompt="q"))
    trace = vf.Trace.for_task(task)
    user = vf.UserMessage(content="q")
    trace.commit_turn([user], _reply("a", [1, 2], [3]))
    assert (trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens) == (2, 1, 3)
    trace.commit_turn([user, trace.nodes[1].message, vf.UserMessage(content="more")], _reply("b", [1, 2, 3, 4], [5, 6]))
    assert (trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens) == (3, 3, 6)
    trace.commit_turn([vf.UserMessage(content="fresh")], _reply("c", [9], [10]))  # a second branch
    branches = trace.branches
    assert trace.num_output_tokens == sum(b.num_output_tokens for b in branches) == 4
    assert trace.num_input_tokens == 4 and trace.num_total_tokens == 8
    trace.calls = trace.calls[:1]  # a replaced list is read afresh
    assert (trace.num_input_tokens, trace.num_output_tokens) == (2, 1)
    trace.calls[0].usage = vf.Usage(prompt_tokens=7, completion_tokens=2)  # and so is a replaced usage
    assert (trace.num_input_tokens, trace.num_output_tokens, trace.num_total_tokens) == (7, 2, 9)
    assert {k: trace.to_record()[k] for k in ("num_input_tokens", "num_output_tokens", "num_total_tokens")} == {
        "num_input_tokens": 7, "num_output_tokens": 2, "num_total_tokens": 9
    }
    # a turn on the first branch's prefix: three branches, two sharing their first call; the counts
    # are the branches' (read the slow way, by the Branch models)
    trace = vf.Trace.for_task(task)
    for prompt, ids in (([user], [1, 2]), ([user, None, vf.UserMessage(content="more")], [1, 2, 3, 4]), ([vf.UserMessage(content="fresh")], [9])):
        trace.commit_turn([m if m is not None else trace.nodes[1].message for m in prompt], _reply("r", ids, [ids[-1] + 1]))
    trace.commit_turn([user, trace.nodes[1].message, vf.UserMessage(content="other")], _reply("d", [1, 2, 3, 11], [12]))
    for t in (trace, build_trace()):
        branches = t.branches
        seen: dict[int, int] = {}  # each call's new input once, from the first branch that has it
        for b in branches:
            prev = 0
            for c in b.calls:
                if c.usage is not None:
                    seen.setdefault(id(c), max(0, c.usage.input_tokens - prev))
                    prev = c.usage.total_tokens
        assert t.num_input_tokens == sum(seen.values())
        assert t.num_output_tokens == sum(b.num_output_tokens for b in branches)
        assert t.num_total_tokens == sum(seen.values()) + sum(c.usage.completion_tokens for c in t.calls if c.usage)
    assert len(trace.branches) == 3 and trace.num_input_tokens == 4 + 1


def test_json_records_round_the_per_token_float_streams_they_carry() -> None:
    """A JSON record keeps RECORD_FLOAT_DECIMALS digits of each per-token float stream a node
    carries (or the caller's ``float_decimals``; None keeps every digit); absent streams stay
    null, and a Python dump is never rounded."""
    trace = build_trace()
    node = trace.nodes[2]
    node.logprobs = [-0.123456789, -1.0]
    node.advantages = [0.987654321] * len(node.token_ids)
    rec = trace.to_record()["nodes"][2]
    assert rec["logprobs"] == [-0.1235, -1.0] and rec["advantages"] == [0.9877] * len(node.token_ids)
    assert rec["entropies"] is None and rec["trainer_logprobs"] is None and rec["reference_logprobs"] is None
    assert trace.to_record(float_decimals=2)["nodes"][2]["logprobs"] == [-0.12, -1.0]
    assert trace.to_record(float_decimals=None)["nodes"][2]["logprobs"] == [-0.123456789, -1.0]
    assert node.model_dump()["logprobs"] == [-0.123456789, -1.0]
    assert '"logprobs":[-0.1235,-1.0]' in node.model_dump_json()


def test_the_writers_episode_line_is_the_episode_record() -> None:
    """traces.jsonl's line is spliced from the episode's own JSON and the engine's keys; it reads
    back as the plain record, odd values included, and a line the serializer cannot write (a lone
    surrogate) is the plain record's."""
    from verifiers.utils.results import HeadedRecord, encode_record
    from verifiers.v1.rollout import episode_line, episode_record

    def state_of(trace: vf.Trace) -> dict:
        episode = vf.Episode(task=trace.task, traces=[trace], ok=True)
        return {"_episode": episode, "_task": vf.Task(trace.task.data), "example_id": 3, "rollout_index": 1,
                "reward": 2.0, "metrics": {"turns": 3.0}, "usage": {"prompt_tokens": 12}, "complete": True,
                "timing": {"total_ms": 1.5}}  # fmt: skip

    def read(line: bytes) -> str:  # NaN-safe comparison of decoded values
        return json.dumps(json.loads(line), sort_keys=True)

    trace = build_trace()
    trace.rewards["odd"] = vf.Reward(score=float("nan"))
    trace.metrics["far"] = float("inf")
    trace.info.update(nan=float("nan"), tup=(1, 2), keys={1: "a"}, big=10**30, text="é ✓")
    state = state_of(trace)
    line = episode_line(state)
    assert isinstance(line, HeadedRecord) and line["example_id"] == 3 and "traces" not in line
    plain = episode_record(state)
    assert read(encode_record(line)) == read(encode_record(dict(plain)))
    assert read(json.dumps(line.full()).encode()) == read(json.dumps(plain).encode())
    clean = build_trace()
    again = vf.WireEpisode.model_validate(json.loads(encode_record(episode_line(state_of(clean)))))
    assert again.traces[0].id == clean.id and again.traces[0].rewards["correct"].score == 1.0

    bad = build_trace()
    bad.info["s"] = "\ud800"
    state = state_of(bad)
    line = episode_line(state)
    assert not isinstance(line, HeadedRecord)
    assert read(encode_record(line)) == read(encode_record(episode_record(state)))


def _episodes() -> list[vf.Episode]:
    """Episodes of different shapes: tools and two branches with token data, per-token float
    streams and loss weights, an image-token map, raw tensors, a failed sub-agent, episode errors."""
    import numpy as np

    from verifiers.v1.graph import encode_ndarray

    plain = build_trace()
    streams = build_trace()
    streams.nodes[2].logprobs = [-0.123456789, -1e-07]
    streams.nodes[2].advantages = [0.987654321] * len(streams.nodes[2].token_ids)
    streams.nodes[4].entropies = [1.23456789, 2.0]
    streams.nodes[4].loss_weights = {"kl": [0.5] * len(streams.nodes[4].token_ids)}
    streams.mm_token_type_id_map = {7: 1, 9: 2}
    tensors = build_trace()
    tensors.nodes[2].routed_experts = encode_ndarray(np.zeros((5, 2, 1), dtype=np.uint8))
    failed = build_trace()
    failed.agent.name, failed.agent.trainable = "helper", False
    failed.calls[-1].finish_reason = "length"
    failed.record_error(RuntimeError("the tool broke"))
    bare = vf.Trace.for_task(vf.Task(vf.WireTaskData(prompt="q")))
    bare.commit_turn([vf.UserMessage(content="q")], vf.Response(id="r", created=0, model="m", message=vf.AssistantMessage(content="a"), finish_reason="stop"))
    run = vf.TrainRunInfo(id="run", work=vf.TrainWorkInfo(step=3, policy=vf.PolicySpan(start=1, end=2)))
    return [
        vf.Episode(task=plain.task, traces=[plain], ok=True),
        vf.Episode(task=streams.task, traces=[streams, bare], ok=True, group=vf.GroupInfo(id="g"), run=run),
        vf.Episode(task=tensors.task, traces=[tensors], ok=True),
        vf.Episode(task=failed.task, traces=[plain, failed], errors=[vf.Error(type="EnvError", message="finalize: no")]),
        vf.Episode(task=bare.task, traces=[bare]),
        vf.Episode(task=bare.task, is_timeout=True),
    ]


def test_the_episode_json_is_byte_for_byte_the_general_serializers() -> None:
    """The episode's JSON (the head of a traces.jsonl line) and the whole line are exactly what the
    general path writes: the record dict (``model_dump``, every computed value and rounded stream
    read the slow way) encoded by pydantic's JSON writer; for every shape of episode, and again
    after the trace changed (cached counts must follow)."""
    import pydantic_core

    from verifiers.utils.results import encode_record
    from verifiers.v1.rollout import episode_line, episode_record

    for episode in _episodes():
        for float_decimals in (4, 2, None):
            assert episode.to_json(float_decimals) == pydantic_core.to_json(episode.to_record(float_decimals))
        state = {"_episode": episode, "_task": vf.Task(episode.task.data), "example_id": 3, "rollout_index": 1,
                 "reward": 0.5, "metrics": {"turns": 3.0}, "usage": {"prompt_tokens": 12}, "complete": True,
                 "timing": {"total_ms": 1.5}, "error": None}  # fmt: skip
        assert encode_record(episode_line(state)) == pydantic_core.to_json(episode_record(state)) + b"\n"
        if episode.traces:
            trace = episode.traces[0]
            trace.commit_turn([vf.UserMessage(content="again")], _reply("x", [30, 31], [32, 33, 34]))
            trace.calls[0].usage = vf.Usage(prompt_tokens=40, completion_tokens=1)
            assert episode.to_json() == pydantic_core.to_json(episode.to_record())
            fresh = [type(t).model_validate(t.model_dump()) for t in episode.traces]  # nothing cached
            counts = [(t.num_input_tokens, t.num_output_tokens, t.num_total_tokens) for t in fresh]
            record = json.loads(episode.to_json())
            assert [(t["num_input_tokens"], t["num_output_tokens"], t["num_total_tokens"]) for t in record["traces"]] == counts
            assert record["num_input_tokens"] == sum(c[0] for c in counts) and record["num_total_tokens"] == sum(c[2] for c in counts)


def test_a_trace_built_by_hand_takes_a_roles_live_config() -> None:
    """Trainers' tests build records as the original types them: ``AgentInfo(config=AgentConfig())``
    is kept as the role's wire record, and the trace reads as any other."""
    from verifiers.v1.configs import WireAgentConfig

    info = vf.AgentInfo(config=vf.AgentConfig(max_turns=3), name="judge")
    assert isinstance(info.config, WireAgentConfig) and info.config.max_turns == 3
    trace = vf.Trace(task=vf.TraceTask(type="Task", data=vf.TaskData(idx=0)), agent=info,
                     rewards={"correct": vf.Reward(score=1.0), "style": vf.Reward(score=0.5, weight=0.2)})  # fmt: skip
    assert trace.reward == 1.1 and vf.Trace.model_validate_json(trace.model_dump_json()).agent.name == "judge"
    with pytest.raises(pydantic.ValidationError):
        vf.AgentInfo(config=vf.TaskData(idx=0))  # any other model is still refused
