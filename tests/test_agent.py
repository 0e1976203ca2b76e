"""Tool-calling agents: the tools' checks and time limit, the agent's rewards, the embedded model's
conversation layout against TRL's, and short real runs of +recipe=support_agent through run.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grpo_exp.agents.tools import ToolTimeout, build_tools, lookup_order, refund, time_limited
from grpo_exp.config.schema import AgentSettings
from grpo_exp.errors import UserError
from grpo_exp.rewards.agent import states_fact, tool_call
from grpo_exp.tracking.metrics import read_metrics
from tests.conftest import ROOT
from tests.test_train_e2e import run_training

FIXTURE = "tests/fixtures/agent_tools.py"
TOOLS = ["lookup_order", "refund"]
SHORT = ("+recipe=support_agent", "logger=none", "grpo.max_steps=3", "dataset.eval_fraction=0")


def call(name: str, **arguments: object) -> list[dict]:
    tool_calls = [{"type": "function", "function": {"name": name, "arguments": arguments}}]
    return [{"role": "assistant", "content": "", "tool_calls": tool_calls}]


def scored(completion: list[dict] | str, tool: str = "lookup_order", order: str = "SO2405") -> float | None:
    return tool_call([completion], tool_column="tool", expect={"order_id": "order_id"}, tools=TOOLS,
                     tool=[tool], order_id=[order])[0]  # fmt: skip


def test_the_right_call_with_valid_arguments_scores_one():
    assert scored(call("lookup_order", order_id="SO2405")) == 1.0
    assert scored(call("refund", order_id="SO4706", reason="坏了"), tool="refund", order="SO4706") == 1.0


@pytest.mark.parametrize(
    "completion",
    [
        call("refund", order_id="SO2405", reason="坏了"),  # the other tool
        call("lookup_order", order_id="SO2406"),  # not the customer's order
        call("lookup_order"),  # an argument missing
        call("lookup_order", order_id="SO2405", carrier="SF"),  # an argument the tool doesn't take
        call("lookup_order", order_id=2405),  # not the hinted type
        call("cancel_order", order_id="SO2405"),  # no such tool
        [{"role": "assistant", "content": "您好，请稍等。"}],  # no call at all
        "a plain-text reply",
    ],
)
def test_a_wrong_call_scores_zero(completion):
    assert scored(completion) == 0.0


def test_a_refund_needs_a_reason():
    assert scored(call("refund", order_id="SO4706", reason=" "), tool="refund", order="SO4706") == 0.0


def test_the_final_reply_must_state_what_the_tool_returned():
    after_tool = [*call("lookup_order", order_id="SO2405"), {"role": "tool", "name": "lookup_order", "content": "..."}]
    right = [*after_tool, {"role": "assistant", "content": "您的订单预计 9月8日 送达。"}]
    vague = [*after_tool, {"role": "assistant", "content": "请耐心等待。"}]
    guessed = [{"role": "assistant", "content": "预计 9月8日 送达"}]  # no tool asked: a guess, not a lookup
    assert states_fact([right, vague, guessed], column="fact", fact=["9月8日"] * 3) == [1.0, 0.0, 0.0]
    assert states_fact([right], column="fact", fact=[None]) == [None]


def test_the_shipped_tools_answer_from_the_order_table():
    assert "9月8日" in lookup_order("SO2405")
    assert "594 元" in refund("SO4706", "坏了")
    with pytest.raises(KeyError):
        lookup_order("SO0000")


def test_a_tool_that_hangs_is_cut_at_its_time_limit_and_keeps_its_schema():
    from transformers.utils import get_json_schema

    def slow(order_id: str) -> str:
        """Wait.

        Args:
            order_id: An order.
        """
        time.sleep(30)
        return order_id

    limited = time_limited(slow, 0.3)
    assert get_json_schema(limited) == get_json_schema(slow)  # TRL shows the model the same tool
    started = time.monotonic()
    with pytest.raises(ToolTimeout, match=r"within 0\.3 s"):
        limited(order_id="A1")
    assert time.monotonic() - started < 2
    with pytest.raises(KeyError):  # an error of the tool's own passes through, for TRL to reply with
        time_limited(lookup_order, 5)("SO0000")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"{FIXTURE}:unhinted", "has no type hint for order_id"),
        (f"{FIXTURE}:undocumented", "has no docstring"),
        (f"{FIXTURE}:missing", "has no function 'missing'"),
        ("tests/fixtures/nowhere.py:tool", "does not exist"),
        ("cancel_order", "unknown tool 'cancel_order'"),
    ],
)
def test_a_tool_trl_could_not_show_the_model_is_refused_in_one_line(spec, message):
    with pytest.raises(UserError, match=message) as raised:
        build_tools(AgentSettings(tools=[spec]))
    assert "\n" not in str(raised.value)


def test_two_tools_of_one_name_are_refused():
    with pytest.raises(UserError, match="both called 'lookup_order'"):
        build_tools(AgentSettings(tools=["lookup_order", f"{FIXTURE}:lookup_order"]))


def test_run_py_refuses_a_tool_without_type_hints_before_the_model_loads(tmp_path):
    command = [sys.executable, "run.py", "+recipe=support_agent", f"agent.tools=[{FIXTURE}:unhinted]", "logger=none"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "no type hint for order_id" in lines[0], result.stderr


def test_the_warm_up_lays_out_a_rollout_as_trl_does():
    """The embedded model learns the tool's reply framed exactly as TRL frames it, and TRL parses its call."""
    from types import SimpleNamespace

    from trl import GRPOTrainer
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        parse_response,
    )

    from grpo_exp.config.schema import TinyRecipe
    from grpo_exp.models import tiny, warmup

    corpus = warmup.build_corpus(TinyRecipe(scenarios={"support_agent": 1.0}, corpus_size=100, tool_share=1.0))
    tokenizer = tiny.train_tokenizer(corpus, 1000)
    example = next(ex for ex in corpus if ex.call is not None)
    trained = None if is_chat_template_prefix_preserving(tokenizer) else get_training_chat_template(tokenizer)
    trainer = SimpleNamespace(
        processing_class=tokenizer, chat_template=trained, _is_vlm=False, _tokenizer=tokenizer, chat_template_kwargs={}
    )
    tool_message = {"role": "tool", "name": "lookup_order", "content": example.tool_reply}
    suffix = GRPOTrainer._get_tool_suffix_ids(trainer, [tool_message])
    assert tokenizer.decode(suffix) == tiny.tool_suffix(example.tool_reply)

    add_response_schema(tokenizer)  # what GRPOTrainer does for Qwen3's template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": example.prompt}], tools=list(example.tools), add_generation_prompt=True
    )
    prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    turn = tokenizer(tiny.call_turn(example.call) + tiny.EOS, add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, turn, prefix=list(prompt))
    assert parsed["tool_calls"][0]["function"] == json.loads(example.call)


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agent_run")
    result = run_training(out, *SHORT)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_the_support_agent_calls_its_tools_and_logs_trls_tool_metrics(agent_run):
    rows = read_metrics(agent_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    for key in ("tools/call_frequency", "tools/failure_frequency", "rewards/tool_call/mean", "rewards/answer/mean"):
        assert all(key in r for r in rows), key
    assert all(r["tools/call_frequency"] > 0 for r in rows)
    assert any(r["rewards/tool_call/mean"] > 0 for r in rows), "some rollouts call the right tool"


@pytest.mark.e2e  # an agent run whose tool hangs until its timeout
def test_a_tool_that_raises_or_hangs_replies_with_its_error_and_counts_as_failed(tmp_path):
    log = tmp_path / "tool_replies.jsonl"
    recorder = f"'{FIXTURE}:records_tool_replies'"
    result = run_training(
        tmp_path,
        *SHORT,
        "grpo.max_steps=1",
        f"agent.tools=[{FIXTURE}:lookup_order,{FIXTURE}:refund]",
        "agent.tool_timeout_s=0.5",
        f"+reward.parts.record={{fn:{recorder},weight:0}}",
        env={"AGENT_TOOL_LOG": str(log)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    row = read_metrics(tmp_path / "metrics.jsonl")[0]
    assert row["tools/call_frequency"] > 0 and row["tools/failure_frequency"] == 1.0
    replies = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    by_tool = {r["name"]: r["content"] for r in replies}
    assert "the order service is down" in by_tool["lookup_order"]
    assert "refund gave no result within 0.5 s" in by_tool["refund"]


def test_the_probe_samples_an_agent_through_its_tools_and_judges_its_parts():
    from tests.test_probe import probed

    result = probed("+recipe=support_agent", "probe.prompts=4", "probe.group_sizes=[4]", "grpo.num_generations=4")
    parts = result["parts"]
    assert set(parts) == {"tool_call", "answer"}
    assert all(part["verdict"] in ("learnable", "flat", "ceiling", "truncated") for part in parts.values())
    assert 0 < parts["tool_call"]["mean"] < 1, "the base model calls the right tool in some rollouts, not all"


def test_a_jobs_tool_use_reaches_its_summary_console_and_report():
    from grpo_exp.report.compare import _result_keys
    from grpo_exp.tracking.metrics import summarize
    from grpo_exp.tracking.outcome import format_outcome

    rows = [{"step": s, "reward": 0.5, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.25} for s in (1, 2)]
    summary = summarize(rows, kl_threshold=0.1)
    assert summary["tool_call_frequency"] == 1.0 and summary["tool_failure_frequency"] == 0.25
    assert "1.00 calls per rollout, 25% of them failed" in format_outcome(summary, Path("job"), None)
    assert "tool_call_frequency" not in summarize([{"step": 1, "reward": 0.5}], kl_threshold=0.1)

    class Job:
        def __init__(self, stats: dict) -> None:
            self.stats = stats

        def value(self, key: str) -> float | None:
            return self.stats.get(key)

    class Sweep:
        objective = "final_reward"

        def __init__(self, *jobs: Job) -> None:
            self.jobs = jobs

    assert "tool_call_frequency" in _result_keys(Sweep(Job(summary)))
    assert "tool_call_frequency" not in _result_keys(Sweep(Job({"final_reward": 0.5})))


def test_the_memory_plan_and_the_length_filter_count_the_tools_in_every_prompt(settings):
    from grpo_exp.dataset import prompt_tokens
    from grpo_exp.memory.prompts import longest_prompt
    from grpo_exp.models import load_tokenizer, model_path

    cfg = settings("+recipe=support_agent")
    planned = longest_prompt(cfg.dataset, cfg.model, cfg.agent.tools).tokens
    assert planned > longest_prompt(cfg.dataset, cfg.model).tokens + 10, "the tools' schemas are in every prompt"
    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    prompt = [{"role": "user", "content": "我的订单 SO2405 到哪了？"}]
    assert prompt_tokens(prompt, tokenizer, build_tools(cfg.agent)) > prompt_tokens(prompt, tokenizer) + 10
