"""ECHO-memory's context manager: records, the select tool, context rebuilds as new segments."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from tests_rollout_helpers import assert_faithful

import agentgym
from agentgym.backends.base import Generation, SamplingParams
from agentgym.backends.hf import HFBackend, teacher_forced_logprobs
from agentgym.backends.scripted import EnvPolicyBackend
from agentgym.core import AgentEnv
from agentgym.rollout import ChatRenderer, RolloutConfig, RolloutEngine, RolloutTask, Termination, Trajectory, Turn
from agentgym.rollout.config import MemoryConfig
from agentgym.rollout.memory import SELECT_TOOL, EpisodeMemory, MemoryManager, compress_turn
from agentgym.types import ErrorKind, Message, ToolCall

SQA = "agentgym/SearchQA-v0"
TASK = RolloutTask(seed=3)  # a 3-hop question: search, open (x3), answer = 7 oracle turns


def _call(name: str, **arguments: Any) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id="call_0", name=name, arguments=arguments)])


class SelectingOracle(EnvPolicyBackend):
    """The env's oracle, with ``select(ids)`` inserted at given turn numbers of each episode."""

    def __init__(self, renderer: ChatRenderer, select_at: dict[int, list[int]], wrong_answer: bool = False) -> None:
        super().__init__(renderer)
        self.select_at = select_at
        self.wrong_answer = wrong_answer
        self._turns: weakref.WeakKeyDictionary[AgentEnv, int] = weakref.WeakKeyDictionary()

    def choose(self, env: AgentEnv, rng: np.random.Generator) -> Message:
        """Select at the scheduled turns, else the oracle (optionally answering wrongly)."""
        k = self._turns.get(env, 0)
        self._turns[env] = k + 1
        if k in self.select_at:
            return _call("select", ids=self.select_at[k])
        action = env.oracle_action()
        if self.wrong_answer and action.tool_calls and action.tool_calls[0].name == "answer":
            return _call("answer", text="certainly not this")
        return action


class ModelScored:
    """Another backend's actions, with the tiny model's log-probs of them given the prompt.

    The recorded log-probs then equal a teacher-forced recompute exactly when the trained token
    sequence is the one the action was generated from.
    """

    per_prompt_sampling: ClassVar[bool] = True

    def __init__(self, inner: EnvPolicyBackend, model: Any) -> None:
        self.inner = inner
        self.model = model
        self.weight_version = 0

    def bind(self, prompt: list[int], env: AgentEnv) -> None:
        """Forward to the inner backend."""
        self.inner.bind(prompt, env)

    def generate(self, prompts: list[list[int]], sampling: SamplingParams) -> list[Generation]:
        """The inner backend's ids, scored by the model."""
        out = self.inner.generate(prompts, sampling)
        for prompt, gen in zip(prompts, out, strict=True):
            gen.logprobs = teacher_forced_logprobs(self.model, [prompt + gen.token_ids])[0][len(prompt) :]
        return out


def _run(backend: Any, renderer: ChatRenderer, manager: MemoryManager | None, **config: Any) -> list[Trajectory]:
    settings = {"max_turns": 12, "max_tokens": 96, "max_wait_s": None, "max_context_tokens": 4096, **config}
    engine = RolloutEngine(backend, renderer, lambda: agentgym.make(SQA), RolloutConfig(**settings),
                           context_manager=manager)
    return engine.run([TASK]).trajectories


# ------------------------------------------------------------------------ unit
def test_select_tool_is_added_with_a_schema_built_like_env_tools() -> None:
    env = agentgym.make(SQA)
    tools = MemoryManager().tools(env.tools)
    assert [t.function.name for t in tools] == [*(t.function.name for t in env.tools), "select"]
    spec = tools[-1].function
    ids = spec.parameters["properties"]["ids"]
    assert ids["type"] == "array" and ids["items"] == {"type": "integer"}
    assert ids["description"].startswith("Ids of the memory records")
    assert spec.parameters["required"] == ["ids"] and spec.description.startswith("Rebuild your context")
    assert tools[-1] == SELECT_TOOL.spec
    with pytest.raises(ValueError, match="already has a tool named 'select'"):
        MemoryManager().tools(tools)


def test_a_record_keeps_its_source_index_the_call_and_a_cut_result() -> None:
    turn = Turn([1], [0.0], tool_calls=[ToolCall(name="search", arguments={"query": "Zeind"})],
                tool_results=[Message(role="tool", content="x" * 50)])
    record = compress_turn(4, turn, result_chars=10)
    assert record.source_turn == 4 and record.call == 'search({"query": "Zeind"})'
    assert record.result == "x" * 10 + " [...]"
    assert record.index_line() == '4: search({"query": "Zeind"})'
    assert compress_turn(0, Turn([1], [0.0]), 10).call == "(no tool call)"


def _memory_with_records(metadata: dict[str, Any], renderer: ChatRenderer, indices: list[int]) -> EpisodeMemory:
    memory = MemoryManager().episode([Message(role="user", content="task")], metadata)
    context, _ = renderer.start([Message(role="user", content="task")], None)
    for k in indices:
        turn = Turn([1], [0.0], tool_calls=[ToolCall(name="search", arguments={"query": f"q{k}"})],
                    tool_results=[Message(role="tool", content=f"result {k}")])
        memory.extend(renderer, context, Message(role="assistant", content="a"), turn, k, 10)
    return memory


@pytest.mark.parametrize(("calls", "detail"), [
    ([ToolCall(name="select", arguments={"ids": [7, 8]})], "no known record id"),
    ([ToolCall(name="select", arguments={"ids": []})], "no known record id"),
    ([ToolCall(name="select", arguments={"ids": "0"})], "argument 'ids'"),
    ([ToolCall(name="select", arguments={"ids": [0]}), ToolCall(name="search", arguments={"query": "q"})],
     "only call of its turn"),
])
def test_an_invalid_select_is_an_error_and_selects_nothing(
    renderer: ChatRenderer, calls: list[ToolCall], detail: str
) -> None:
    metadata: dict[str, Any] = {}
    memory = _memory_with_records(metadata, renderer, [0, 1])
    action = Message(role="assistant", tool_calls=calls)
    assert memory.handles(action)
    observation, reward, terminated, truncated, info, _ = memory.step(agentgym.make(SQA), action, index=2)
    assert info["error"].kind is ErrorKind.INVALID_ARGUMENTS and detail in info["error"].detail
    assert observation[0].role == "tool" and observation[0].content.startswith("Error:")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert metadata["selection_turns"] == [] and metadata["evidence_turns"] == []
    context, _ = renderer.start([Message(role="user", content="task")], None)
    turn = Turn([1], [0.0], tool_calls=calls, tool_results=observation)
    out = memory.extend(renderer, context, action, turn, 2, 50)
    assert not out.new_segment and out.ids and sorted(memory.records) == [0, 1]  # no rebuild, and no record


def test_a_valid_select_records_the_selection_and_its_evidence(renderer: ChatRenderer) -> None:
    metadata: dict[str, Any] = {}
    memory = _memory_with_records(metadata, renderer, [0, 1, 2])
    observation, *_, info, _ = memory.step(agentgym.make(SQA), _call("select", ids=[2, 9, 0, 2]), index=3)
    assert "error" not in info and "Unknown ids ignored: [9]" in observation[0].content
    assert metadata["selection_turns"] == [3] and metadata["evidence_turns"] == [0, 2]
    context, _ = renderer.start([Message(role="user", content="task")], None)
    turn = Turn([1], [0.0], tool_calls=[ToolCall(name="select", arguments={"ids": [2, 0]})], tool_results=observation)
    out = memory.extend(renderer, context, _call("select", ids=[2, 0]), turn, 3, 50)
    assert out.new_segment and out.reason == "memory rebuild: select"
    assert sorted(memory.records) == [0, 1, 2]  # the select turn is not a record
    text = context.messages[-1].content
    assert "0: search" in text and "1: search" in text and "result 0" in text and "result 2" in text
    assert "result 1" not in text  # not selected: only its index line is kept
    assert out.ids == renderer.encode(context.rendered) and context.rendered.endswith("assistant\n")
    assert metadata["memory_rebuilds"] == [{"turn": 4, "reason": "select", "records": [0, 2]}]


# ------------------------------------------------------------------ episodes
def test_an_oracle_episode_that_selects_starts_a_faithful_new_segment(
    hf_backend: HFBackend, renderer: ChatRenderer, tokenizer: Any
) -> None:
    oracle = SelectingOracle(renderer, {2: [1], 5: [0, 3, 99]})
    (traj,) = _run(ModelScored(oracle, hf_backend.model), renderer, MemoryManager())
    names = [t.tool_calls[0].name for t in traj.turns]
    assert names == ["search", "open", "select", "search", "open", "select", "search", "open", "answer"]
    assert traj.termination is Termination.TERMINATED and traj.reward == 1.0  # select never reached the env
    for k in (2, 5):
        assert traj.turns[k].error is None and traj.turns[k].tool_results[0].content.startswith("Context rebuilt")
        assert traj.turns[k].observation_ids == []  # the context after it is the next segment's prompt
    assert traj.metadata["selection_turns"] == [2, 5]
    assert traj.metadata["evidence_turns"] == [0, 1, 3]  # 99 was no record
    assert [(s.start_turn, s.reason) for s in traj.segments] == [
        (0, "prompt"), (3, "memory rebuild: select"), (6, "memory rebuild: select")]
    prompt = tokenizer.decode(traj.segments[2].prompt_ids)
    assert "In what year was the founder" in prompt and "select" in prompt  # task and tool list kept
    assert "[3] search" in prompt and "[0] search" in prompt and "\n4: open" in prompt  # kept; indexed
    assert "[1] open" not in prompt and "[4] open" not in prompt  # not selected: index line only
    assert any(t.reason == "memory rebuild: select" for t in traj.prefix_breaks)
    assert_faithful(hf_backend.model, traj, 1.0)
    assert [len(f.input_ids) for f in traj.flatten()] == [
        len(s.prompt_ids) + sum(len(t.action_ids) + len(t.observation_ids) for t in traj.turns[s.start_turn:end])
        for s, end in zip(traj.segments, [3, 6, len(traj.turns)], strict=True)]


def test_a_budget_rebuild_keeps_sampled_log_probs_faithful(hf_backend: HFBackend, renderer: ChatRenderer) -> None:
    env = agentgym.make(SQA)
    observation, _ = env.reset(seed=TASK.seed)
    prompt = len(renderer.start(observation, MemoryManager().tools(env.tools))[1])
    memory = MemoryConfig(budget_tokens=prompt + 150, keep_last=1)  # the engine builds the manager from it
    (traj,) = _run(hf_backend, renderer, None, max_turns=5, max_tokens=24, memory=memory)
    rebuilds = traj.metadata["memory_rebuilds"]
    assert rebuilds and all(r["reason"] == "budget" and r["records"] == [r["turn"] - 1] for r in rebuilds)
    assert [s.start_turn for s in traj.segments[1:]] == [r["turn"] for r in rebuilds]
    assert traj.metadata["selection_turns"] == [] and traj.metadata["evidence_turns"] == []
    assert traj.termination is Termination.MAX_TURNS  # the budget kept the context from overflowing
    assert_faithful(hf_backend.model, traj, 1.0)


def test_without_a_manager_there_is_no_select_tool_and_no_memory(
    hf_backend: HFBackend, renderer: ChatRenderer, tokenizer: Any
) -> None:
    (plain,) = _run(hf_backend, renderer, None, max_turns=3, max_tokens=16)
    assert len(plain.turns) == 3 and len(plain.segments) == 1
    assert not {"selection_turns", "evidence_turns", "memory_rebuilds"} & set(plain.metadata)
    assert '"name": "select"' not in tokenizer.decode(plain.segments[0].prompt_ids)


def test_tree_rollouts_refuse_a_manager(renderer: ChatRenderer, tiny_dir: Path) -> None:
    engine = RolloutEngine(HFBackend.from_pretrained(tiny_dir), renderer, lambda: agentgym.make(SQA),
                           context_manager=MemoryManager())
    with pytest.raises(ValueError, match="tree rollouts"):
        engine.run_trees([TASK])

