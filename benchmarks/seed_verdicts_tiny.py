"""The verdict over seeds on real tiny-model sweeps: an A/A pair and a truly better learning rate (issue 49).

- **lr contrast**: ``optimizer.lr=3e-5,3e-3`` x ``seed=0,1,2,3``, one multirun: 3e-3 should be the clear best.
- **A/A**: two configurations that differ only in a tag that changes nothing (``logger.tags=[a]`` and
  ``[b]``), 4 seeds each. Training is deterministic per seed, so the same seeds would give identical runs;
  the two arms run disjoint seeds (0-3 and 4-7) as two multiruns into one sweep folder (job folders
  ``a0``-``a3`` and ``b0``-``b3``), then the report is rebuilt over all eight. Expected: "can't be told apart".

Each job: the tiny model, ``grpo.max_steps`` steps (40), ``threads=1``, one job at a time; the lr contrast
logs to W&B offline (its interval table goes to a ``sweep-report`` run), the A/A arms to no tracker. Prints
each sweep's verdict line and its table of configurations over seeds.

Usage::

    .venv/bin/python benchmarks/seed_verdicts_tiny.py --out outputs/multirun        # about 12 min on 2 cores
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import harness
from grpo_exp.report.compare import write_report

COMMON = ["threads=1"]


def multirun(folder: Path, overrides: list[str], subdir: str | None = None) -> float:
    """One ``run.py -m`` into ``folder``; its wall time. Exits on a failed sweep."""
    where = [f"hydra.sweep.dir={folder}"] + ([f"hydra.sweep.subdir={subdir}"] if subdir else [])
    finished = harness.run_py("-m", *COMMON, *overrides, *where, show=True)
    if not finished.ok:
        sys.exit(f"sweep into {folder} failed (exit {finished.returncode})")
    return finished.wall_s


def show(name: str, report: Path, seconds: float) -> None:
    text = report.read_text(encoding="utf-8")
    verdict = text.split("## Verdict\n")[1].strip().splitlines()[0]
    table = text.split("## Configurations over seeds")[1].split("\n## ")[0]
    print(f"\n### {name} ({seconds:.0f} s): {report}\n\n{verdict}\n\n## Configurations over seeds{table}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=harness.ROOT / "outputs" / "multirun")
    parser.add_argument("--max-steps", type=int, default=40)
    args = parser.parse_args()
    steps = [f"grpo.max_steps={args.max_steps}"]
    contrast, aa = args.out / "lr_contrast_tiny", args.out / "aa_tiny"
    for folder in (contrast, aa):
        shutil.rmtree(folder, ignore_errors=True)
    seconds = multirun(contrast, ["optimizer.lr=3e-5,3e-3", "seed=0,1,2,3", "logger.mode=offline", *steps])
    show("lr 3e-5 vs 3e-3, 4 seeds each", contrast / "report" / "report.md", seconds)
    seconds = multirun(aa, ["logger.tags=[a]", "seed=0,1,2,3", "logger=none", *steps], "a${hydra.job.num}")
    seconds += multirun(aa, ["logger.tags=[b]", "seed=4,5,6,7", "logger=none", *steps], "b${hydra.job.num}")
    show("A/A: a tag apart, seeds 0-3 and 4-7", write_report(aa), seconds)


if __name__ == "__main__":
    main()
