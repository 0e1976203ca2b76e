"""The reward probe and the adaptive profile roll an agent out in its environments as TRL's
environment_factory does (training/profile.py, Sampler): each completion in its own instance, reset with
its row (what reset returns joined to the prompt), its tools that instance's methods and the job's
stateless tools, and the rewards given the instances, so ``environment_state`` scores each rollout from
its own state.

A policy that writes its turns out (``ScriptedPolicy``) makes the calls known, so each score can be
checked against the calls its own rollout made; a real probe of +recipe=support_env closes the loop.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from grpo_exp.agents.env_runner import EnvironmentSet, build_environments
from grpo_exp.agents.runner import build_tools
from grpo_exp.config.schema import AgentSettings, GrpoSettings, RewardPart, RewardSettings
from grpo_exp.models import tiny
from grpo_exp.rewards.compose import build_rewards
from grpo_exp.training.profile import Sampler
from tests.conftest import QUICK_STORE_MODEL

FIXTURE = "tests/fixtures/environments.py"
LIMIT_S = 5  # agent.tool_timeout_s: far above what a counter's call takes
QUESTION = "Count for me."
WEIGHT = 2.0  # the state part's weight, so the totals show it was applied


class ScriptedPolicy:
    """A policy whose turns are written out: a rollout's first turn calls ``add`` with the next of
    ``numbers`` (1, 2, 3, ... unless given), its turn after the counter's reply says it is done. It keeps
    every first-turn prompt it was given, decoded, in the order it answered them."""

    def __init__(self, tokenizer: Any, numbers: Iterator[int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.numbers = numbers or itertools.count(1)
        self.prompts: list[str] = []
        self.called: list[int] = []

    def eval(self) -> ScriptedPolicy:
        return self

    def parameters(self) -> Iterator[Any]:
        import torch

        yield torch.zeros(1)

    def generate(self, input_ids: Any, attention_mask: Any, generation_config: Any) -> Any:
        import torch

        rows = []
        for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
            text = self.tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
            rows += [ids + self._turn(text) for _ in range(generation_config.num_return_sequences)]
        width, pad = max(map(len, rows)), self.tokenizer.pad_token_id
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows])

    def _turn(self, text: str) -> list[int]:
        if text.count(f"{tiny.BOS}assistant") > 1:  # after the counter's reply
            return self._encode("done" + tiny.EOS)
        self.prompts.append(text)
        self.called.append(next(self.numbers))
        call = json.dumps({"name": "add", "arguments": {"n": self.called[-1]}})
        return self._encode(tiny.call_turn(call) + tiny.EOS)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def tokenizer(compose_module: Callable[..., Any]) -> Any:
    """The embedded tiny model's tokenizer (Qwen3's chat template, as TRL parses it)."""
    from grpo_exp import models

    cfg = compose_module()
    return models.load_tokenizer(cfg.model, models.model_path(cfg.model))


@pytest.fixture(scope="module")
def compose_module() -> Callable[..., Any]:
    from hydra import compose, initialize_config_dir

    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import CONF_DIR, register_schema

    register_schema()

    def settings(*overrides: str) -> Any:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return to_settings(compose(config_name="config", overrides=list(overrides)))

    return settings


@pytest.fixture
def sampler() -> Iterator[Callable[..., Sampler]]:
    """sampler(policy, tokenizer, environment, tools=(), batch=...) -> a Sampler scoring the state part;
    the helper processes it started end with the test."""
    runners: list[Any] = []

    def build(policy: Any, tokenizer: Any, environment: str, tools: Sequence[str] = (), batch: int = 8) -> Sampler:
        environments = build_environments(AgentSettings(environment=environment, tool_timeout_s=LIMIT_S))
        toolset = build_tools(AgentSettings(tools=list(tools), tool_timeout_s=LIMIT_S))
        runners.extend(r for r in (environments.runner, toolset.runner) if r is not None)
        state = RewardPart(fn="environment_state", weight=WEIGHT)
        rewards, weights = build_rewards(RewardSettings(parts={"state": state}))
        grpo = GrpoSettings(max_completion_length=96, max_tool_calling_iterations=2)
        return Sampler(policy, tokenizer, rewards, weights, grpo, batch, toolset.tools, environments)

    yield build
    for runner in runners:
        runner.close()


def rows(*starts: int) -> list[dict[str, Any]]:
    """Dataset rows as the trainer gets them: a chat prompt and the column the counter's reset reads."""
    return [{"prompt": [{"role": "user", "content": QUESTION}], "start": start} for start in starts]


def test_the_state_part_scores_each_rollout_from_its_own_instance(sampler, tokenizer):
    """Each rollout calls add with its own number; its score is its row's start plus that number, not
    None and not another rollout's. One prompt per chunk, so the second prompt's rollouts reuse the first's
    pooled instances: reset starts each afresh."""
    policy = ScriptedPolicy(tokenizer)
    sampled = sampler(policy, tokenizer, f"{FIXTURE}:Counter", batch=1).sample(rows(10, 20), samples=3, step=None)
    assert policy.called == [1, 2, 3, 4, 5, 6]
    assert [s.parts["state"] for s in sampled] == [[11.0, 12.0, 13.0], [24.0, 25.0, 26.0]]
    assert [s.totals for s in sampled] == [[22.0, 24.0, 26.0], [48.0, 50.0, 52.0]]


def test_two_rollouts_of_one_prompt_do_not_share_state(sampler, tokenizer):
    """Every rollout adds 1: each counter ends at 1, where one shared counter would count up to 4."""
    policy = ScriptedPolicy(tokenizer, itertools.repeat(1))
    (sampled,) = sampler(policy, tokenizer, f"{FIXTURE}:Counter").sample(rows(0), samples=4, step=None)
    assert sampled.parts["state"] == [1.0, 1.0, 1.0, 1.0]


def test_what_reset_returns_reaches_each_rollouts_own_prompt(sampler, tokenizer):
    """Ticketed's reset returns the next ticket: TRL appends it to the last user message, so each
    rollout of one row has a prompt of its own, and each is encoded and answered as it is."""
    policy = ScriptedPolicy(tokenizer)
    sampler(policy, tokenizer, f"{FIXTURE}:Ticketed").sample(rows(0, 0), samples=2, step=None)
    tickets = [f"{QUESTION} (ticket {n})" for n in range(1, 5)]
    assert [sum(t in prompt for t in tickets) for prompt in policy.prompts] == [1, 1, 1, 1]
    assert sorted(next(t for t in tickets if t in p) for p in policy.prompts) == tickets


def test_a_rollouts_tools_are_its_instances_methods_and_the_jobs_stateless_tools(sampler, tokenizer):
    """The prompt shows both (TRL renders the environment's methods after the job's tools), and the
    environment's call still acts on the rollout's instance."""
    policy = ScriptedPolicy(tokenizer)
    tool = "tests/fixtures/agent_tools.py:lookup_order"
    (sampled,) = sampler(policy, tokenizer, f"{FIXTURE}:Counter", tools=[tool]).sample(rows(5), 2, step=None)
    for prompt in policy.prompts:
        assert '"name": "lookup_order"' in prompt and '"name": "add"' in prompt
        assert prompt.index('"name": "lookup_order"') < prompt.index('"name": "add"')
    assert sampled.parts["state"] == [6.0, 7.0]


def test_the_probe_scores_the_support_store_from_its_rollouts_and_ends_its_processes(compose_module):
    """A real probe of +recipe=support_env (the tiny store model, briefly warmed up): the state part has
    scores (each rollout's store's get_reward), and the store's process is ended with the probe."""
    from grpo_exp.plan.probe import probe
    from grpo_exp.spec import build_spec

    spec = build_spec(
        compose_module(
            "+recipe=support_env",
            *QUICK_STORE_MODEL,
            "probe.prompts=2",
            "probe.group_sizes=[4]",
            "grpo.num_generations=4",
            "threads=1",
        )
    )
    result = probe(spec)
    state = result["parts"]["state"]
    assert state["mean"] is not None and 0.0 <= state["mean"] <= 1.0
    assert state["alike"]["4"] is not None  # groups were formed from scored rollouts
    assert isinstance(spec.environments, EnvironmentSet) and spec.environments.runner is not None
    assert spec.environments.runner.helper._proc is None, "the probe left the store's process running"
