"""Does the store agent learn the store's rules? ``+recipe=support_env`` on the embedded model, per seed.

For each seed, one run as docs/environments.md gives it (``python run.py +recipe=support_env``, no W&B).
Its held-out episode success (the store's ``get_reward`` on requests about the 8 orders training never
sees, 4 episodes each) comes from the job's own evaluations, before the first step and after the last.

Then the benchmark plays held-out episodes itself, from the model the job started from and from the one
it saved, TRL's tool loop outside the trainer (``grpo_exp.agents.rollout``), each against a fresh store,
and splits them by the action the rules require: a gain that comes from one action alone (always
escalating is right for a third of the requests) shows there, as does the share of episodes that looked
the right order up first.

Usage::

    .venv/bin/python benchmarks/support_env.py                 # seeds 42, 43, 44
    .venv/bin/python benchmarks/support_env.py --seeds 1 --out runs/support_env
    .venv/bin/python benchmarks/support_env.py --tabulate runs/support_env/support_env-1
"""

from __future__ import annotations

import collections
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from benchmarks.task_job import load

EPISODES = 4  # episodes played per held-out request and model (32 requests)
ACTIONS = ("refund", "replace", "escalate")


def play(model_dir: Path, config: dict[str, Any], seed: int) -> dict[str, float]:
    """Held-out episodes of one model: success overall and by the action the rules require, and the
    share that looked the request's order up first."""
    import torch

    from grpo_exp.agents.environments import tool_methods
    from grpo_exp.agents.rollout import continue_with_tools
    from grpo_exp.agents.store import SupportStore, right_action
    from grpo_exp.agents.tools import order_table
    from grpo_exp.shipped import read_records, shipped_file

    model, tokenizer = load(model_dir)
    model.eval()
    grpo = config["grpo"]
    limit, rounds = grpo["max_completion_length"], grpo["max_tool_calling_iterations"]
    generator = torch.Generator().manual_seed(seed)

    def generate(inputs: list[list[int]], max_new: int) -> list[list[int]]:
        turns = []
        for ids in inputs:
            torch.manual_seed(int(torch.randint(2**31, (1,), generator=generator)))
            x = torch.tensor([ids])
            out = model.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=max_new, do_sample=True,
                temperature=grpo["temperature"], eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
            turns.append(out[0, len(ids) :].tolist())
        return turns

    statuses = {oid: order["status"] for oid, order in order_table().items()}  # where a row gives no status
    rows = [r for r in read_records(shipped_file("support_env.jsonl")) if r["held_out"]]
    wins: dict[str, list[float]] = collections.defaultdict(list)
    looked = 0
    for row in rows:
        right = right_action(row.get("status") or statuses[row["order_id"]], row["want"])
        for _ in range(EPISODES):
            store = SupportStore()
            store.reset(**row)
            tools = [getattr(store, name) for name, _ in tool_methods(SupportStore)]
            messages = [{"role": "user", "content": row["prompt"]}]
            prompt = list(tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True,
                                                        tokenize=True, return_dict=False))  # fmt: skip
            first = generate([prompt], limit)
            played, _ = continue_with_tools(tokenizer, generate, [prompt], first, [tools], limit, rounds)
            calls = [m["tool_calls"][0]["function"] for m in played[0] if m.get("tool_calls")]
            looked += (
                bool(calls)
                and calls[0]["name"] == "lookup_order"
                and (calls[0].get("arguments") or {}).get("order_id") == row["order_id"]
            )
            wins[right].append(store.get_reward())
    every = [w for scores in wins.values() for w in scores]
    return {
        "success": statistics.mean(every),
        **{action: statistics.mean(wins[action]) for action in ACTIONS if wins[action]},
        "looked_up": looked / len(every),
        "episodes": len(every),
    }


def figures(out: Path) -> dict[str, Any]:
    """One finished run: its own held-out evaluations and the episodes played from both its models
    (sampled with the job's seed)."""
    from benchmarks.task_job import TaskJob
    from grpo_exp.folder import read_yaml

    summary = harness.Job(out).summary()
    config = read_yaml(out / "config.yaml")
    seed = config["seed"]
    started = TaskJob.read(out).starting_model
    return {
        "run": out.name,
        "before": summary["base_eval_reward"],
        "after": summary["final_eval_reward"],
        "train_s": summary["wall_time_s"] - summary["startup_s"],
        "steps": summary["steps"],
        "played_before": play(started, config, seed),
        "played_after": play(out / "model", config, seed),
    }


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| run | held-out success before | after | gain | training s | steps |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['before']:.3f} | {r['after']:.3f} | **{r['after'] - r['before']:+.3f}** | "
            f"{r['train_s']:.0f} | {r['steps']} |"
        )
    gains = [r["after"] - r["before"] for r in rows]
    lines.append(f"\nmean gain {statistics.mean(gains):+.3f}, smallest {min(gains):+.3f} over {len(rows)} seeds\n")
    header = " | ".join(f"{a} before -> after" for a in ACTIONS)
    lines += [
        f"| run (episodes played) | success before -> after | {header} | looked the order up |",
        "|---|---|" + "---|" * len(ACTIONS) + "---|",
    ]
    for r in rows:
        before, after = r["played_before"], r["played_after"]
        cells = " | ".join(f"{before[a]:.2f} -> {after[a]:.2f}" for a in ACTIONS)
        lines.append(
            f"| {r['run']} ({after['episodes']}) | {before['success']:.2f} -> {after['success']:.2f} | {cells} | "
            f"{before['looked_up']:.2f} -> {after['looked_up']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    harness.recipe_over_seeds(__doc__, "support_env", figures, table)


if __name__ == "__main__":
    main()
