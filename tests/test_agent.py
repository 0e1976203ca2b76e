"""Tool-calling agents: the tools' checks, the helper process their calls run in (time limit, reply cap,
failures the model sees), the agent's rewards, the embedded model's conversation layout against TRL's,
and short real runs of +recipe=support_agent through run.py."""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from grpo_exp.agents.runner import TRUNCATED, ToolFailed, Toolset, build_tools
from grpo_exp.agents.tools import lookup_order, refund
from grpo_exp.config.schema import AgentSettings
from grpo_exp.errors import UserError
from grpo_exp.rewards.agent import states_fact, tool_call
from grpo_exp.tracking.metrics import read_metrics
from tests.conftest import ROOT, report_columns
from tests.fixtures.hostile_tools import HUGE_CHARS
from tests.test_train_e2e import run_training

FIXTURE = "tests/fixtures/agent_tools.py"
HOSTILE = "tests/fixtures/hostile_tools.py"
SLACK_S = 2  # a loaded machine's delay past a time limit
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


@pytest.fixture
def tools_of() -> Iterator[Callable[..., Toolset]]:
    """tools_of(*specs, **agent settings) -> the job's tools; their helper process ends with the test."""
    built: list[Toolset] = []

    def build(*specs: str, **agent: Any) -> Toolset:
        built.append(build_tools(AgentSettings(tools=list(specs), **agent)))
        return built[-1]

    yield build
    for toolset in built:
        if toolset.runner is not None:
            toolset.runner.close()


def ended(pid: int, within_s: float = 10) -> bool:
    """Whether process ``pid`` is gone (or a zombie nobody has reaped yet) within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.05)
    return False


def test_a_tool_is_shown_to_the_model_as_written_and_answers_from_its_process(tools_of):
    from transformers.utils import get_json_schema

    toolset = tools_of("lookup_order", "refund")
    assert [get_json_schema(t) for t in toolset.tools] == [get_json_schema(lookup_order), get_json_schema(refund)]
    assert not any(inspect.iscoroutinefunction(t) for t in toolset.tools)  # TRL calls each as a plain function
    assert "9月8日" in toolset.tools[0](order_id="SO2405")
    with pytest.raises(ToolFailed, match="no order SO0000"):  # an error of the tool's own, for TRL to reply with
        toolset.tools[0](order_id="SO0000")


def test_a_long_reply_is_cut_with_a_marker_the_model_reads_and_counted(tools_of):
    toolset = tools_of(f"{HOSTILE}:huge", f"{HOSTILE}:huge_error", "lookup_order", tool_reply_max_chars=100)
    huge, huge_error, lookup = toolset.tools
    cut = "SO1" + "x" * 97 + f"\n[tool reply cut: the first 100 of {HUGE_CHARS + 3} characters]"
    assert huge(order_id="SO1") == cut
    with pytest.raises(ToolFailed) as failed:  # an error's message is a reply too
        huge_error(order_id="SO1")
    assert str(failed.value) == cut
    assert "tool reply cut" not in lookup(order_id="SO2405")
    assert toolset.runner.take_metrics() == {TRUNCATED: 2 / 3}  # of this batch's calls, two were cut
    assert toolset.runner.take_metrics() == {TRUNCATED: 0.0}  # each batch counts its own


def test_the_reply_cap_is_checked_before_the_model_loads(settings):
    from grpo_exp.config.checks import check

    assert settings("+recipe=support_agent").agent.tool_reply_max_chars > 0
    with pytest.raises(UserError, match=r"^agent.tool_reply_max_chars=-1 is out of range"):
        check(settings("agent.tool_reply_max_chars=-1"))


def test_the_rewards_log_the_tools_cut_replies_through_trls_log_metric(settings):
    from grpo_exp.rewards.compose import build_rewards

    rewards, _ = build_rewards(settings("+recipe=support_agent").reward, lambda: {TRUNCATED: 0.25})
    logged: list[tuple[str, float]] = []
    columns = {"tool": ["lookup_order"], "order_id": ["SO2405"], "fact": ["9月8日"]}
    for reward in rewards:
        reward(["p"], [call("lookup_order", order_id="SO2405")], log_metric=lambda *kv: logged.append(kv), **columns)
    assert [kv for kv in logged if kv[0] == TRUNCATED] == [(TRUNCATED, 0.25)]  # once per batch


def test_a_tool_that_spins_is_killed_at_its_limit_and_leaves_no_thread_behind(tools_of):
    lookup, spin = tools_of("lookup_order", f"{HOSTILE}:spin", tool_timeout_s=1).tools
    lookup(order_id="SO2405")  # the helper has started
    threads = threading.active_count()
    started = time.monotonic()
    with pytest.raises(ToolFailed, match=r"^spin gave no result within 1 s$"):
        spin(order_id="A1")
    assert time.monotonic() - started < 1 + SLACK_S
    assert threading.active_count() == threads, "nothing of the call goes on beside training"
    assert "9月8日" in lookup(order_id="SO2405")  # a fresh helper answers the next call


def test_an_async_tool_is_awaited(tools_of):
    (tool,) = tools_of("tests/fixtures/async_tools.py:lookup_order").tools
    assert tool(order_id="SO1") == "order SO1: shipped, awaited"


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ("interrupts", r"^KeyboardInterrupt\(\)$"),
        ("exits", r"^SystemExit\(3\)$"),
        ("ends", r"^ends ended its process \(exit code 5\)$"),
        ("unprintable", r"^unprintable returned a Unprintable that can't be shown as text: no text for this object$"),
    ],
)
def test_a_tool_that_raises_anything_or_gives_no_text_fails_as_a_reply(tools_of, behaviour, message):
    """TRL sends a tool's ``Exception`` back to the model and counts the call as failed; anything else
    (KeyboardInterrupt, SystemExit, a ``__str__`` that raises after the call) ended the run before."""
    (tool,) = tools_of(f"{HOSTILE}:{behaviour}").tools
    with pytest.raises(ToolFailed, match=message):
        tool(order_id="A1")


def test_processes_a_tool_starts_end_with_the_job(tools_of, tmp_path, monkeypatch):
    pids = tmp_path / "pids"
    monkeypatch.setenv("TOOL_PID_FILE", str(pids))
    toolset = tools_of(f"{HOSTILE}:leaves_a_process", f"{HOSTILE}:spin", tool_timeout_s=1)
    leaves, spin = toolset.tools
    leaves(order_id="A1")
    with pytest.raises(ToolFailed):  # killed at its limit, with what the first call left behind
        spin(order_id="A2")
    first = [int(pid) for pid in pids.read_text().split()]
    assert all(ended(pid) for pid in first)
    leaves(order_id="A3")  # a fresh helper, and a process left behind again
    toolset.runner.close()  # the job ends
    assert all(ended(int(pid)) for pid in pids.read_text().split())


def test_the_tool_process_ends_when_the_trainer_is_killed_mid_call(tmp_path):
    pids = tmp_path / "pids"
    trainer = f"""
import os, signal, threading, time
from grpo_exp.agents.runner import build_tools
from grpo_exp.config.schema import AgentSettings
agent = AgentSettings(tools=["{HOSTILE}:leaves_a_process", "{HOSTILE}:spin"], tool_timeout_s=600)
leaves, spin = build_tools(agent).tools
leaves(order_id="A1")
threading.Thread(target=spin, kwargs={{"order_id": "A2"}}, daemon=True).start()
time.sleep(0.5)
os.kill(os.getpid(), signal.SIGKILL)
"""
    env = {**os.environ, "TOOL_PID_FILE": str(pids)}
    killed = subprocess.run([sys.executable, "-c", trainer], cwd=ROOT, env=env, capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert all(ended(int(pid)) for pid in pids.read_text().split()), "the helper, spinning, and its child"


@pytest.mark.parametrize("code", [0, 2])
def test_a_tool_module_that_exits_as_it_is_imported_is_refused_in_one_line(monkeypatch, code):
    monkeypatch.setenv("TOOL_IMPORT_EXIT", str(code))
    with pytest.raises(UserError, match=rf"exits_at_import.py called sys.exit\({code}\); remove that call$") as raised:
        build_tools(AgentSettings(tools=["tests/fixtures/exits_at_import.py:lookup_order"]))
    assert "\n" not in str(raised.value)


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


def test_run_py_refuses_a_tool_module_that_exits_at_import_before_the_model_loads():
    """sys.exit(0) while the tools load ended the run with status 0 and no output: it looked like success."""
    tool = "tests/fixtures/exits_at_import.py:lookup_order"
    command = [sys.executable, "run.py", "+recipe=support_agent", f"agent.tools=[{tool}]", "logger=none"]
    env = {**os.environ, "TOOL_IMPORT_EXIT": "0"}
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "called sys.exit(0)" in lines[0], result.stderr


def test_the_warm_up_lays_out_a_rollout_as_trl_does():
    """The embedded model learns the tool's reply framed exactly as TRL frames it (the framing's own
    equality with GRPOTrainer's: tests/test_trl_contract.py), and TRL parses its call."""
    from trl.chat_template_utils import add_response_schema, parse_response

    from grpo_exp.agents.rollout import suffix_framer
    from grpo_exp.config.schema import TinyRecipe
    from grpo_exp.models import tiny, warmup

    corpus = warmup.build_corpus(TinyRecipe(scenarios={"support_agent": 1.0}, corpus_size=100, tool_share=1.0))
    tokenizer = tiny.train_tokenizer(corpus, 1000)
    example = next(ex for ex in corpus if ex.turns)
    ((call, reply),) = example.turns
    tool_message = {"role": "tool", "name": "lookup_order", "content": reply}
    suffix = suffix_framer(tokenizer)([tool_message])
    assert tokenizer.decode(suffix) == tiny.tool_suffix(reply)

    add_response_schema(tokenizer)  # what GRPOTrainer does for Qwen3's template
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": example.prompt}], tools=list(example.tools), add_generation_prompt=True
    )
    prompt = prompt["input_ids"] if hasattr(prompt, "keys") else prompt
    turn = tokenizer(tiny.call_turn(call) + tiny.EOS, add_special_tokens=False)["input_ids"]
    parsed = parse_response(tokenizer, turn, prefix=list(prompt))
    assert parsed["tool_calls"][0]["function"] == json.loads(call)


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("agent_run")
    result = run_training(out, *SHORT)
    assert result.returncode == 0, result.stderr[-3000:]
    return out


def test_the_support_agent_calls_its_tools_and_logs_trls_tool_metrics(agent_run):
    rows = read_metrics(agent_run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    tools = ("tools/call_frequency", "tools/failure_frequency", TRUNCATED)
    for key in (*tools, "rewards/tool_call/mean", "rewards/answer/mean"):
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


@pytest.mark.e2e  # an agent run whose tools misbehave each way in turn
def test_a_run_whose_tools_misbehave_every_way_trains_on_and_leaves_no_process_behind(tmp_path):
    """Issue 51: each of these ended the run, stalled it, or outlived it; now each is a reply the model reads."""
    log, pids = tmp_path / "tool_replies.jsonl", tmp_path / "pids"
    behaviours = "huge,spin,interrupts,exits,unprintable,leaves_a_process"
    result = run_training(
        tmp_path,
        *SHORT,
        "grpo.max_steps=4",
        "grpo.max_completion_length=256",  # room for every reply: TRL drops one that would pass the limit
        f"agent.tools=[{HOSTILE}:lookup_order,{HOSTILE}:refund]",
        "agent.tool_timeout_s=1",
        "agent.tool_reply_max_chars=100",
        f"+reward.parts.record={{fn:'{FIXTURE}:records_tool_replies',weight:0}}",
        env={
            "AGENT_TOOL_LOG": str(log),
            "HOSTILE_TOOL": behaviours,
            "HOSTILE_TOOL_CALLS": str(tmp_path / "calls"),
            "TOOL_PID_FILE": str(pids),
        },
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "completed"
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert any(r[TRUNCATED] > 0 for r in rows) and all(r["tools/failure_frequency"] > 0 for r in rows)
    replies = " ".join(json.loads(line)["content"] for line in log.read_text(encoding="utf-8").splitlines())
    for said in ("[tool reply cut: the first 100 of", "gave no result within 1 s", "KeyboardInterrupt()",
                 "SystemExit(3)", "can't be shown as text", ": checked"):  # fmt: skip
        assert said in replies, said
    assert all(ended(int(pid)) for pid in pids.read_text().split()), "the helpers and what their tools started"


@pytest.mark.e2e  # a run stopped while its tool spins
def test_ctrl_c_while_a_tool_spins_stops_after_the_step_and_ends_the_tools_processes(tmp_path, monkeypatch):
    from tests.test_long_runs import WAIT_S, last_step, start, wait_for

    pids, job = tmp_path / "pids", tmp_path / "job"
    monkeypatch.setenv("HOSTILE_TOOL", "leaves_a_process,spin")
    monkeypatch.setenv("HOSTILE_TOOL_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("TOOL_PID_FILE", str(pids))
    tools = f"agent.tools=[{HOSTILE}:lookup_order,{HOSTILE}:refund]"
    process = start(*SHORT, tools, "agent.tool_timeout_s=2", "grpo.max_steps=50", f"hydra.run.dir={job}")
    wait_for(lambda: last_step(job) >= 1, process)
    os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the tools' helper has a session of its own
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 130, err[-3000:]
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps"] < 50
    assert all(ended(int(pid)) for pid in pids.read_text().split())


def test_the_probe_samples_an_agent_through_its_tools_and_judges_its_parts():
    from tests.test_probe import probed

    result = probed("+recipe=support_agent", "probe.prompts=4", "probe.group_sizes=[4]", "grpo.num_generations=4")
    parts = result["parts"]
    assert set(parts) == {"tool_call", "answer"}
    assert all(part["verdict"] in ("learnable", "flat", "ceiling", "truncated") for part in parts.values())
    assert 0 < parts["tool_call"]["mean"] < 1, "the base model calls the right tool in some rollouts, not all"


def test_a_jobs_tool_use_reaches_its_summary_console_and_report():
    from grpo_exp.tracking.metrics import summarize
    from grpo_exp.tracking.outcome import format_outcome

    rows = [{"step": s, "reward": 0.5, "tools/call_frequency": 1.0, "tools/failure_frequency": 0.25} for s in (1, 2)]
    summary = summarize(rows, kl_threshold=0.1)
    assert summary["tool_call_frequency"] == 1.0 and summary["tool_failure_frequency"] == 0.25
    assert "1.00 calls per rollout, 25% of them failed" in format_outcome(summary, Path("job"), None)
    assert "tool_call_frequency" not in summarize([{"step": 1, "reward": 0.5}], kl_threshold=0.1)
    assert "tool_call_frequency" in report_columns(summary)
    assert "tool_call_frequency" not in report_columns({"final_reward": 0.5})


def test_the_memory_plan_and_the_length_filter_count_the_tools_in_every_prompt(settings):
    from grpo_exp.dataset import prompt_tokens
    from grpo_exp.memory.prompts import longest_prompt
    from grpo_exp.models import load_tokenizer, model_path

    cfg = settings("+recipe=support_agent")
    planned = longest_prompt(cfg.dataset, cfg.model, cfg.agent.tools).tokens
    assert planned > longest_prompt(cfg.dataset, cfg.model).tokens + 10, "the tools' schemas are in every prompt"
    tokenizer = load_tokenizer(cfg.model, model_path(cfg.model))
    prompt = [{"role": "user", "content": "我的订单 SO2405 到哪了？"}]
    assert prompt_tokens(prompt, tokenizer, build_tools(cfg.agent).tools) > prompt_tokens(prompt, tokenizer) + 10
