"""GRPO's update written out by hand, outside TRL, on the arithmetic recipe's warmed-up model.

The question it answered (benchmarks/arithmetic.md, third session): when ``+recipe=arithmetic``, then
without its habit phase, did not raise held-out accuracy, was that grpo-exp's or TRL's code, or the
method on this model? This loop samples ``--problems`` training problems x ``--group`` completions,
scores them with the task's own verifier, normalises each group's rewards (mean 0, std 1, as TRL's
``scale_rewards=group``), and takes one optimizer step on the advantage-weighted log-probabilities of
the sampled tokens (no clipping needed: one update per generation, so the ratio is 1), with the gradient
clipped at 1 as the recipe does. Held-out accuracy per sample (the job's held-out problems, samples and
temperature) every 40 steps. Results: benchmarks/arithmetic.md.

Usage, on the model a recipe run started from (its job folder's run_info.json names it)::

    .venv/bin/python benchmarks/reinforce_check.py --job outputs/<date>/<time> --optimizer adam --lr 3e-4
    .venv/bin/python benchmarks/reinforce_check.py --job outputs/<date>/<time> --optimizer sgd --lr 0.3
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from benchmarks.task_job import TaskJob, load, sample
    from grpo_exp.rewards.task import tagged_answer
    from grpo_exp.training.trl_private import STD_EPSILON  # TRL's, in the group normalisation

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job", type=Path, required=True, help="a +recipe=arithmetic job folder: its starting model")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--problems", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--seed", type=int, default=42)
    args = p.parse_args()

    torch.manual_seed(args.seed)
    job = TaskJob.read(args.job)  # the job's task, held-out region and sampling
    grpo = job.grpo
    model, tokenizer = load(job.starting_model)
    train = job.problems(held_out=False, count=4000, seed=args.seed + 1000)
    held_out = job.problems(held_out=True, count=job.data["eval_samples"])
    verifier = job.verifier()

    def scored(batch, k):
        enc, out, completions, texts = sample(model, tokenizer, batch, grpo, k)
        scores = [verifier.score_answer(tagged_answer(t, "answer"), batch[i // k]) for i, t in enumerate(texts)]
        return enc, out, completions, torch.tensor(scores, dtype=torch.float32)

    def held_out_accuracy() -> float:
        model.eval()
        scores = [scored(held_out[i : i + 16], grpo["num_generations_eval"])[3] for i in range(0, len(held_out), 16)]
        return torch.cat(scores).eq(1.0).float().mean().item()

    params = model.parameters()
    optimizer = torch.optim.SGD(params, lr=args.lr) if args.optimizer == "sgd" else torch.optim.Adam(params, lr=args.lr)
    rng = random.Random(args.seed)
    print(f"step 0: held-out accuracy {held_out_accuracy():.3f}", flush=True)
    solved: list[float] = []
    for step in range(1, args.steps + 1):
        batch = rng.sample(train, args.problems)
        enc, out, completions, scores = scored(batch, args.group)
        groups = scores.view(args.problems, args.group)
        advantages = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + STD_EPSILON)).view(-1)
        solved.append(scores.eq(1.0).float().mean().item())
        ended = completions == tokenizer.eos_token_id  # tokens up to and including the first end count
        last = torch.where(ended.any(1), ended.float().argmax(1), completions.shape[1] - 1)
        mask = (torch.arange(completions.shape[1])[None] <= last[:, None]).float()
        attention = torch.cat([enc["attention_mask"].repeat_interleave(args.group, 0), mask.long()], 1)
        model.train()
        logits = model(input_ids=out, attention_mask=attention).logits[:, enc["input_ids"].shape[1] - 1 : -1]
        logps = torch.log_softmax(logits, -1).gather(-1, completions[..., None])[..., 0]
        loss = -(advantages[:, None] * logps * mask).sum() / mask.sum()  # TRL's dapo: over all tokens
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step}: training problems solved (last 10 steps) {sum(solved[-10:]) / 10:.3f}", flush=True)
        if step % 40 == 0:
            print(f"step {step}: held-out accuracy {held_out_accuracy():.3f}", flush=True)


if __name__ == "__main__":
    main()
