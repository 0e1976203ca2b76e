"""Does `reward=math`'s accuracy part score answers as TRL's own `trl.rewards.accuracy_reward` does?

Scores each reply of ``tests/math_answers.py`` with both: ``AGREED_WITH_TRL`` (forms on which both
should agree) gives "agrees on X of N"; ``NEW_FORMS`` (forms read since issue 48) gives how many
the accuracy part now scores right, and TRL's score beside it. The part's params are those of
``conf/reward/math.yaml``. ``--code DIR`` imports grpo_exp and reads the conf from another tree,
such as an earlier commit's (before issue 48: 81ea680).

Usage::

    .venv/bin/python benchmarks/math_vs_trl.py
    mkdir /tmp/before && git archive 81ea680 grpo_exp conf | tar -x -C /tmp/before
    .venv/bin/python benchmarks/math_vs_trl.py --code /tmp/before
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="the tree whose grpo_exp and conf/ are scored")
    args = parser.parse_args()
    sys.path[:0] = [str(args.code.resolve()), str(ROOT)]
    logging.disable(logging.WARNING)  # math-verify warns about each answer it can't parse
    from tests.math_answers import AGREED_WITH_TRL, NEW_FORMS

    ours = accuracy_part(args.code)
    agreed = 0
    for reply, reference, _ in AGREED_WITH_TRL:
        theirs, mine = trl_score(reply, reference), ours(reply, reference)
        agreed += theirs == mine
        verdict = "same" if theirs == mine else "DIFF"
        print(f"{verdict}  trl {theirs}  ours {mine}  {last_line(reply)}  (ref {reference})")
    print(f"agrees with TRL's accuracy_reward on {agreed} of {len(AGREED_WITH_TRL)}\n")
    right = 0
    for name, (reply, reference, _) in NEW_FORMS.items():
        mine = ours(reply, reference)
        right += mine == 1.0
        print(f"{name:30}  ours {mine}  trl {trl_score(reply, reference)}  {last_line(reply)}")
    print(f"reads {right} of {len(NEW_FORMS)} new forms right")


def accuracy_part(code: Path) -> Any:
    """The accuracy part of ``code``'s tree with its conf's params, as a function of (reply, reference)."""
    from grpo_exp.rewards.math import math_accuracy

    params = yaml.safe_load((code / "conf/reward/math.yaml").read_text())["parts"]["accuracy"]["params"]
    return lambda reply, reference: math_accuracy([reply], **{params["column"]: [reference]}, **params)[0]


def trl_score(reply: str, reference: str) -> float | None:
    from trl.rewards import accuracy_reward

    return accuracy_reward([[{"role": "assistant", "content": reply}]], [reference])[0]


def last_line(reply: str) -> str:
    return repr(reply.splitlines()[-1])


if __name__ == "__main__":
    main()
