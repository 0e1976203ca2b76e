"""Stateful environments (TRL's environment_factory): the checks that refuse a class before the model loads,
each rollout's own instance in the helper process, the faults it contains (reset, a method or get_reward
that raises, hangs or returns 100 MB), get_reward as a weighted, time-limited reward part, and a short
real run of +recipe=support_env through TRL."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_exp.agents.env_runner import CALLS, RESET_FAILED, REWARD_FAILED, TURNS, EnvironmentSet, build_environments
from grpo_exp.agents.runner import ToolFailed
from grpo_exp.agents.store import SupportStore, right_action
from grpo_exp.config.schema import AgentSettings, OnTimeout, RewardPart, RewardSettings
from grpo_exp.errors import UserError
from grpo_exp.rewards.compose import build_rewards, check_answered
from grpo_exp.tracking.metrics import read_eval_metrics, read_metrics, summarize
from grpo_exp.tracking.outcome import format_outcome
from tests.conftest import QUICK_STORE_MODEL, ROOT
from tests.test_train_e2e import run_training

FIXTURE = "tests/fixtures/environments.py"
LIMIT_S = 2  # the tests' agent.tool_timeout_s
SLACK_S = 3  # a loaded machine's delay past a time limit
SHORT = ("+recipe=support_env", *QUICK_STORE_MODEL, "logger=none", "grpo.max_steps=2", "grpo.eval_on_start=false")
SHORT += ("threads=1",)


@pytest.fixture
def envs() -> Iterator[Callable[..., EnvironmentSet]]:
    """envs(spec, **agent settings) -> the job's environments; their helper process ends with the test."""
    built: list[EnvironmentSet] = []

    def build(spec: str, **agent: Any) -> EnvironmentSet:
        built.append(build_environments(AgentSettings(environment=spec, tool_timeout_s=LIMIT_S, **agent)))
        return built[-1]

    yield build
    for environments in built:
        if environments.runner is not None:
            environments.runner.close()


def state_part(**reward: Any) -> Any:
    """The environment_state part as TRL calls it, through the job's reward composition (weight, time limit)."""
    settings = RewardSettings(parts={"state": RewardPart(fn="environment_state", weight=2.0)}, **reward)
    (part,), weights = build_rewards(settings)
    assert weights == [2.0]
    return part


def score(part: Any, instances: list[Any], logged: dict[str, float] | None = None) -> list[float | None]:
    completions = [[{"role": "assistant", "content": "done"}] for _ in instances]
    log = (lambda key, value: logged.__setitem__(key, value)) if logged is not None else None
    return part(["p"] * len(instances), completions, environments=instances, log_metric=log, trainer_state=None)


# -- the checks: one line each, before the model loads --------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"{FIXTURE}:NoReset", "has no reset method"),
        (f"{FIXTURE}:Unhinted", "no type hint for text"),
        (f"{FIXTURE}:Undocumented", "has no docstring"),
        (f"{FIXTURE}:RewardWithArguments", "get_reward takes answer"),
        (f"{FIXTURE}:WordReward", r"\(WordReward\): get_reward returns str, not a number"),
        (
            "tests/fixtures/env_import_fails.py:Store",
            "importing tests/fixtures/env_import_fails.py failed: ImportError",
        ),
        (f"{FIXTURE}:HUGE_CHARS", "holds a int as 'HUGE_CHARS', not a class"),
        ("no_such_environment", "unknown environment 'no_such_environment'; known: support_store"),
    ],
)
def test_an_environment_trl_could_not_use_is_refused_in_one_line(spec, message):
    with pytest.raises(UserError, match=message) as refused:
        build_environments(AgentSettings(environment=spec))
    assert "\n" not in str(refused.value)


def test_run_py_refuses_an_environment_without_reset_before_the_model_loads():
    command = [sys.executable, "run.py", "+recipe=support_env", f"agent.environment={FIXTURE}:NoReset", "logger=none"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "NoReset) has no reset method" in lines[0], result.stderr


def test_a_get_reward_that_returns_no_number_fails_the_run_in_one_line_naming_the_class(envs):
    environments = envs(f"{FIXTURE}:UnannotatedWordReward")
    instance = environments.factory()
    instance.reset()
    returned = r"environment UnannotatedWordReward\.get_reward returned a str \('good'\), not a number"
    with pytest.raises(UserError, match=returned):
        score(state_part(), [instance])


def test_the_memory_plan_counts_the_environments_tools_in_every_prompt(settings):
    """As the length filter does (trainer.py renders the environments' methods into every prompt)."""
    from grpo_exp.dataset import prompt_tokens
    from grpo_exp.memory.prompts import longest_prompt
    from grpo_exp.models import load_tokenizer, model_path

    cfg = settings("+recipe=support_env", *QUICK_STORE_MODEL)
    planned = longest_prompt(cfg.dataset, cfg.model, environments=[cfg.agent.environment]).tokens
    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    rows = [json.loads(line) for line in (ROOT / "grpo_exp/data/support_env.jsonl").read_text().splitlines()]
    tools = build_environments(cfg.agent).tools()
    longest = max(prompt_tokens([{"role": "user", "content": r["prompt"]}], tokenizer, tools) for r in rows)
    assert planned == longest > longest_prompt(cfg.dataset, cfg.model).tokens + 10


def test_the_state_part_without_an_environment_is_refused(settings):
    from grpo_exp.spec import build_spec

    cfg = settings("+recipe=support_env", "agent=none")
    with pytest.raises(UserError, match="reads an environment's get_reward, but the job has none"):
        build_spec(cfg)


def test_several_environments_need_the_rows_environment_column(settings):
    from grpo_exp.spec import build_spec

    cfg = settings("+recipe=support_env", "agent.environment=null", "+agent.environments={store: support_store}")
    with pytest.raises(UserError, match="by its `environment` column, which support_env lacks"):
        build_spec(cfg)


# -- what TRL sees and what each rollout gets -----------------------------------------------------------


def test_trl_sees_the_classs_name_tools_and_schemas_and_no_get_reward_of_its_own(envs):
    """TRL lists tools on the class as inspect.getmembers finds them and adds a get_reward it finds as a
    reward of weight 1; the stand-in keeps the schema and leaves the reward to the environment_state part."""
    import inspect

    from transformers.utils import get_json_schema

    environments = envs("support_store")
    stand_in = environments.factory
    assert stand_in.__name__ == "SupportStore" and stand_in is not SupportStore
    public = [n for n, _ in inspect.getmembers(stand_in, inspect.isfunction) if not n.startswith("_")]
    assert public == ["escalate", "lookup_order", "refund", "replace", "reset"]  # no get_reward for TRL to add
    theirs = [get_json_schema(getattr(SupportStore(), n)) for n in ("escalate", "lookup_order", "refund", "replace")]
    assert [get_json_schema(t) for t in environments.tools()] == theirs


def test_two_rollouts_of_one_group_never_see_each_others_state(envs):
    environments = envs(f"{FIXTURE}:Counter")
    first, second = environments.factory(), environments.factory()
    assert first.reset(start=10) == "the counter is at 10"
    second.reset(start=0)
    for _ in range(3):
        first.add(n=1)
    assert second.add(n=1) == "1"
    part = state_part()
    assert score(part, [first, second]) == [13.0, 1.0]


def test_a_pooled_instance_starts_each_rollout_afresh(envs):
    """TRL reuses its instances from batch to batch; each reset builds the user's class anew in the helper."""
    environments = envs(f"{FIXTURE}:Counter")
    instance = environments.factory()
    instance.reset(start=0)
    instance.add(n=5)
    instance.reset(start=0)
    assert instance.add(n=1) == "1"


def test_several_environments_go_to_trl_as_a_dict_each_name_resetting_its_own_class():
    environments = build_environments(
        AgentSettings(environments={"store": "support_store", "counter": f"{FIXTURE}:Counter"}, tool_timeout_s=LIMIT_S)
    )
    try:
        assert sorted(environments.factory) == ["counter", "store"]
        counter, store = environments.factory["counter"](), environments.factory["store"]()
        counter.reset(start=2)
        store.reset(order_id="SO2405", want="replace")
        assert counter.add(n=1) == "3"
        assert "运输中" in store.lookup_order(order_id="SO2405")
        assert sorted(t.__name__ for t in environments.tools()) == [
            "add", "escalate", "lookup_order", "refund", "replace"
        ]  # fmt: skip
    finally:
        environments.runner.close()


def test_a_call_before_reset_fails_as_a_tool_reply(envs):
    instance = envs(f"{FIXTURE}:Counter").factory()
    with pytest.raises(ToolFailed, match="not reset"):
        instance.add(n=1)


# -- faults, each contained -----------------------------------------------------------------------------


def test_a_reset_that_raises_leaves_only_its_rollout_unscored(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    broken, fine = environments.factory(), environments.factory()
    assert broken.reset(fault="reset_raises") is None
    fine.reset()
    assert fine.act(how="ok") == "acted 1"
    with pytest.raises(ToolFailed, match="did not start: reset broke"):
        broken.act(how="ok")
    logged: dict[str, float] = {}
    assert score(state_part(), [broken, fine], logged) == [None, 1.0]
    assert logged[RESET_FAILED] == 0.5


def test_a_reset_that_hangs_is_killed_at_its_limit(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    instance = environments.factory()
    started = time.monotonic()
    assert instance.reset(fault="reset_hangs") is None
    assert time.monotonic() - started < LIMIT_S + SLACK_S
    instance.reset()  # the next reset starts a fresh helper
    assert instance.act(how="ok") == "acted 1"


def test_a_method_that_raises_replies_with_its_error_and_keeps_the_state(envs):
    instance = envs(f"{FIXTURE}:Hostile").factory()
    instance.reset()
    instance.act(how="ok")
    with pytest.raises(ToolFailed, match="act broke"):
        instance.act(how="raise")
    assert instance.act(how="ok") == "acted 3"


def test_a_method_that_hangs_is_killed_and_the_rollouts_sharing_its_process_are_told(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    spinning, other = environments.factory(), environments.factory()
    spinning.reset()
    other.reset()
    started = time.monotonic()
    with pytest.raises(ToolFailed, match=f"act gave no result within {LIMIT_S} s"):
        spinning.act(how="hang")
    assert time.monotonic() - started < LIMIT_S + SLACK_S
    with pytest.raises(ToolFailed, match="state was lost"):
        other.act(how="ok")
    assert score(state_part(), [spinning, other]) == [None, None]
    other.reset()  # a new rollout works again
    assert other.act(how="ok") == "acted 1"


def test_a_100_mb_reply_is_cut_to_the_cap(envs):
    instance = envs(f"{FIXTURE}:Hostile", tool_reply_max_chars=100).factory()
    instance.reset()
    reply = instance.act(how="huge")
    assert reply.startswith("x" * 100) and f"of {100_000_000} characters" in reply and len(reply) < 200


def test_a_get_reward_that_raises_leaves_its_rollout_unscored(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    broken, fine = environments.factory(), environments.factory()
    broken.reset(fault="reward_raises")
    fine.reset()
    fine.act(how="ok")
    logged: dict[str, float] = {}
    assert score(state_part(), [broken, fine], logged) == [None, 1.0]
    assert logged[REWARD_FAILED] == 0.5


def test_a_get_reward_that_never_returns_fails_the_run_as_a_reward_part_does(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    instance = environments.factory()
    part = state_part(max_timeouts_in_a_row=2)
    instance.reset(fault="reward_hangs")
    assert score(part, [instance]) == [None]  # the first batch unscored, with a warning (on_timeout=skip)
    check = pytest.raises(UserError, match=r"'state' \(environment_state\) never returned")
    with check:
        check_answered([part])
    instance.reset(fault="reward_hangs")
    with pytest.raises(UserError, match="on 2 calls in a row"):
        score(part, [instance])


def test_a_get_reward_that_hangs_under_on_timeout_fail_stops_at_once(envs):
    environments = envs(f"{FIXTURE}:Hostile")
    instance = environments.factory()
    instance.reset(fault="reward_hangs")
    with pytest.raises(UserError, match="took over"):
        score(state_part(on_timeout=OnTimeout.fail), [instance])


# -- the shipped store and the episode metrics ----------------------------------------------------------


LOOKUP = ("lookup_order", "SO4706", {})


@pytest.mark.parametrize(
    ("want", "actions", "reward"),
    [
        ("refund", [LOOKUP, ("escalate", "SO4706", {"reason": "不想要了"})], 1.0),  # shipped: a person decides
        ("replace", [LOOKUP, ("replace", "SO4706", {"reason": "坏了"})], 1.0),
        ("replace", [LOOKUP, LOOKUP, ("replace", "SO4706", {"reason": "坏了"})], 1.0),  # looking twice is harmless
        ("replace", [("replace", "SO4706", {"reason": "坏了"})], 0.0),  # acted without reading the state: refused
        ("replace", [LOOKUP, *[("replace", "SO4706", {"reason": "坏了"})] * 2], 0.0),  # done twice
        ("refund", [LOOKUP, ("refund", "SO4706", {"reason": "不要了"})], 0.0),  # an ineligible refund, refused
        ("refund", [LOOKUP, ("refund", "SO4706", {"reason": "不要了"}), ("escalate", "SO4706", {"reason": "x"})], 0.0),
        ("replace", [("lookup_order", "SO2405", {}), ("replace", "SO2405", {"reason": "坏了"})], 0.0),  # not the
        # request's order
    ],
)
def test_the_store_rewards_the_right_action_once_on_the_right_order(want, actions, reward):
    store = SupportStore()
    store.reset(order_id="SO4706", want=want)  # SO4706 is in transit (运输中)
    for name, order, arguments in actions:
        with contextlib.suppress(ValueError):  # the store refuses what its rules forbid
            getattr(store, name)(order_id=order, **arguments)
    assert store.get_reward() == reward


def test_the_rows_status_is_the_orders_state_in_that_episode():
    """One order, one request, two days: the row's status decides the right action, and the lookup shows it."""
    rewards = {}
    for status in ("待发货", "派送中"):
        store = SupportStore()
        store.reset(order_id="SO4706", want="refund", status=status)
        assert store.lookup_order(order_id="SO4706").endswith(f"：{status}")
        with contextlib.suppress(ValueError):
            store.refund(order_id="SO4706", reason="不想要了")
        rewards[status] = store.get_reward()
    assert rewards == {"待发货": 1.0, "派送中": 0.0}  # a refund once shipped is refused


def test_an_action_before_a_lookup_is_refused_with_what_to_do():
    store = SupportStore()
    store.reset(order_id="SO4706", want="replace")
    with pytest.raises(ValueError, match="请先查询订单 SO4706"):
        store.replace(order_id="SO4706", reason="坏了")
    assert store.done == [] and store.refused == ["replace"]


def test_the_store_rules_depend_on_the_orders_state():
    assert right_action("待发货", "refund") == "refund"
    assert right_action("运输中", "refund") == "escalate"
    assert right_action("派送中", "replace") == "replace"
    assert right_action("待发货", "replace") == "escalate"


def test_the_state_part_logs_turns_and_tool_calls_by_name(envs):
    environments = envs(f"{FIXTURE}:Counter")
    first, second = environments.factory(), environments.factory()
    first.reset()
    second.reset()
    first.add(n=1)
    first.add(n=1)
    logged: dict[str, float] = {}
    part = state_part()
    completions = [[{"role": "assistant", "content": "", "tool_calls": []}, {"role": "assistant", "content": "x"}]] * 2
    part(["p", "p"], completions, environments=[first, second], log_metric=logged.__setitem__, trainer_state=None)
    assert logged[TURNS] == 2.0 and logged[CALLS.format(name="add")] == 1.0


def test_a_jobs_episodes_reach_its_summary_and_end_block():
    """Turns and each tool's calls per episode, over the last tenth of steps, as the job's last lines show them."""
    steps = [{"step": s, "reward": 0.5, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.0} for s in (1, 2)]
    episodes = {TURNS: 2.5, CALLS.format(name="lookup_order"): 1.0, CALLS.format(name="refund"): 0.25}
    summary = summarize([*steps[:1], steps[1] | episodes], kl_threshold=0.1) | {"status": "completed"}
    assert summary["episode_turns"] == 2.5 and summary["episode_tool_calls"] == {"lookup_order": 1.0, "refund": 0.25}
    block = format_outcome(summary, Path("job"), None)
    assert "  episodes  2.50 turns; calls lookup_order 1.00, refund 0.25 per episode (last tenth of steps)" in block
    assert "episodes" not in format_outcome(summarize(steps, kl_threshold=0.1), Path("job"), None)  # tools only


# -- through TRL ----------------------------------------------------------------------------------------


def test_a_support_env_run_trains_through_trls_environment_factory(tmp_path):
    """run.py hands TRL the store as environment_factory: TRL resets one instance per rollout and passes
    them to the reward, which logs what only environments give (the metrics below), in training and on
    the held-out requests."""
    result = run_training(tmp_path, *SHORT)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for key in ("rewards/state/mean", TURNS, RESET_FAILED, REWARD_FAILED, "tools/call_frequency"):
        assert all(key in r for r in rows), key
    assert all(r[RESET_FAILED] == 0.0 for r in rows)
    evaluations = [r for r in read_eval_metrics(tmp_path / "metrics.jsonl") if "eval/reward" in r]
    assert evaluations and all(f"eval/{TURNS}" in r for r in evaluations)  # held-out episodes run in the store too
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["episode_turns"] >= 1


def test_prompts_too_long_with_the_environments_tools_are_refused_with_their_length(settings):
    from grpo_exp import dataset
    from grpo_exp.models import load_tokenizer, model_path

    cfg = settings("+recipe=support_env", *QUICK_STORE_MODEL, "dataset.max_prompt_tokens=5")
    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    tools = build_environments(cfg.agent).tools()
    with pytest.raises(UserError, match=r"max_prompt_tokens=5 \(the shortest: \d+ tokens, with the schemas of the 4 "):
        dataset.load_splits(cfg.dataset, tokenizer, tools)
