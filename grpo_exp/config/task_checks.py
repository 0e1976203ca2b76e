"""The sizes of a generated-task job, bounded before anything heavy loads.

A generated task's problems are all drawn before training starts, so a typo in a size is minutes
of silence: the bounds below refuse it in one line. The task's own settings need reasoning-gym and
are checked with the data (``grpo_exp/tasks/checks.py``); what a curriculum waits on is checked
against what held-out evaluations log (``grpo_exp/tracking/held_out.py``).
"""

from __future__ import annotations

from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import UserError

# Training problems of a generated task are drawn, tokenized and held in memory before the first step
# (chain_sum draws about 4,000 a second, knight_swap about 2), and TRL goes through them again after
# an epoch: more than this is a typo, or minutes of silence for problems no run of ours reaches.
MAX_TRAINING_PROBLEMS = 200_000
# Every evaluation samples each held-out problem grpo.num_generations_eval times; at 10,000 problems
# a held-out pass@1 is within ±0.01 (95 %), so more only makes each evaluation longer.
MAX_HELD_OUT_PROBLEMS = 10_000


def check_sizes(settings: ExperimentConfig) -> None:
    data = settings.dataset
    if data.num_samples is not None and data.num_samples > MAX_TRAINING_PROBLEMS:
        raise UserError(
            f"dataset.num_samples={data.num_samples}: at most {MAX_TRAINING_PROBLEMS:,} generated training problems "
            "(all are drawn before the first step, and TRL goes through them again after an epoch)"
        )
    if data.eval_fraction and data.eval_samples > MAX_HELD_OUT_PROBLEMS:
        raise UserError(
            f"dataset.eval_samples={data.eval_samples}: at most {MAX_HELD_OUT_PROBLEMS:,} held-out problems (every "
            "evaluation samples each one grpo.num_generations_eval times; 10,000 already pin pass@1 to ±0.01)"
        )
