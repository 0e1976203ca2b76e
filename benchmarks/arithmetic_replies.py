"""Where the arithmetic recipe's gain comes from: its held-out replies split into worked and answered at once.

For a finished ``+recipe=arithmetic`` job, samples the job's own held-out problems (its config's task,
region, split seed, sampling temperature and length) from the model it started from and from the one
it saved, and prints per model the share of replies answered at once (no ``=``: no working) and how
often each kind is right, by number of terms. Figures: benchmarks/arithmetic.md.

Usage::

    .venv/bin/python benchmarks/arithmetic.py --out runs/arithmetic
    .venv/bin/python benchmarks/arithmetic_replies.py runs/arithmetic/arithmetic-42
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.task_job import TaskJob, load, sample

WORKING = "="  # every worked line is "total op term = result"; an answer given at once has none
SAMPLES = 8  # per problem, as the recipe's mean@8
BATCH = 16  # problems sampled together


def replies(task: TaskJob, folder: Path, seed: int) -> dict[tuple[int, str], tuple[int, int]]:
    """(terms, "worked" | "at once") -> (right, replies) for the model in ``folder`` on the job's held-out problems."""
    import torch

    from grpo_exp.rewards.task import tagged_answer

    held_out = task.problems(held_out=True, count=task.data["eval_samples"])
    verifier = task.verifier()
    model, tokenizer = load(folder)
    torch.manual_seed(seed)
    right, total = Counter(), Counter()
    for start in range(0, len(held_out), BATCH):
        batch = held_out[start : start + BATCH]
        for i, text in enumerate(sample(model, tokenizer, batch, task.grpo, SAMPLES)[3]):
            entry = batch[i // SAMPLES]
            kind = (entry["metadata"]["num_terms"], "worked" if WORKING in text else "at once")
            right[kind] += verifier.score_answer(tagged_answer(text, "answer"), entry) == 1.0
            total[kind] += 1
    return {kind: (right[kind], total[kind]) for kind in sorted(total)}


def line(name: str, split: dict[tuple[int, str], tuple[int, int]]) -> str:
    count = sum(n for _, n in split.values())
    at_once = sum(n for (_, how), (_, n) in split.items() if how == "at once")
    parts = ", ".join(f"{terms} terms {how}: {r / n:.2f} of {n}" for (terms, how), (r, n) in split.items())
    mean = sum(r for r, _ in split.values()) / count
    return f"{name}: mean@{SAMPLES} {mean:.3f}, answered at once {at_once / count:.0%} ({parts})"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("jobs", type=Path, nargs="+", help="finished +recipe=arithmetic job folders")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    args = p.parse_args()
    # Jobs of one sweep start from one model on the same problems: its replies are sampled once.
    starts: dict[tuple[Path, str, str], str] = {}
    for job in args.jobs:
        task = TaskJob.read(job)
        start = (task.starting_model, repr(task.data), repr(task.grpo))
        if start not in starts:
            starts[start] = line("before", replies(task, task.starting_model, args.seed))
        print(f"{job.name} {starts[start]}")
        print(line(f"{job.name} after", replies(task, task.saved_model, args.seed)))


if __name__ == "__main__":
    main()
