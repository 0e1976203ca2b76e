"""The reward probe: verdicts from scores, and real probes of the tiny model on the three cases it must flag."""

from __future__ import annotations

import json

import pytest
from hydra import initialize_config_dir

from grpo_exp.config.schema import CONF_DIR, MonitorSettings, register_schema
from grpo_exp.errors import UserError
from grpo_exp.job.preflight import compose_job, job_spec
from grpo_exp.plan.probe import format_probe, group_sizes, judge_part, probe
from grpo_exp.tracking.monitor import FLAT_REMEDY, TRUNCATED_REMEDY
from tests.conftest import FIXTURES

# A small probe (8 prompts x 8 completions), so each real one takes seconds.
SMALL = ("probe.prompts=8", "probe.group_sizes=[4,8]")
CONSTANT = f"+reward.parts.const={{fn:'{FIXTURES / 'probe_rewards.py'}:constant',weight:1}}"


def probed(*overrides: str) -> dict:
    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        spec = job_spec(compose_job("config", [*SMALL, *overrides]))
    return probe(spec)


def judged(scores: list[list[float]], ceiling: float | None = None, cut: list[list[bool]] | None = None) -> dict:
    """The verdict on a part with these scores, for groups of 4 (and 8); cut completions are the longest."""
    cut = cut or [[False] * len(row) for row in scores]
    lengths = [[48 if c else 10 + i for i, c in enumerate(row)] for row in cut]
    return judge_part("p", scores, lengths, cut, ceiling, [4, 8], 4, MonitorSettings())


def test_verdicts_from_scores():
    mixed = [[0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]] * 4
    assert judged(mixed, ceiling=1.0)["verdict"] == "learnable"
    result = judged([[1.0] * 8] * 4, ceiling=1.0)
    assert result["verdict"] == "ceiling" and result["at_ceiling"] == 1.0 and "drop reward.parts.p" in result["remedy"]
    unknown = judged([[1.0] * 8] * 4)  # the same scores, but nothing says 1.0 is the part's best
    assert unknown["verdict"] == "flat" and unknown["remedy"] == FLAT_REMEDY.format(part="p")
    assert unknown["alike"] == {"4": 1.0, "8": 1.0} and unknown["group_std"] == 0.0


def test_alike_shares_are_measured_per_group_size():
    # each prompt: 4 wrong, then 4 with one right; groups of 4 are half alike, groups of 8 never
    row = [0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert judged([row] * 3)["alike"] == {"4": 0.5, "8": 0.0}


def test_a_part_that_pays_for_length_the_limit_cuts_is_truncated():
    scores = [[0.1, 0.1, 0.2, 0.6, 0.1, 0.2, 0.1, 0.7]] * 4
    cut = [[False, False, False, True, False, False, False, True]] * 4  # a quarter cut, one in every group
    result = judged(scores, cut=cut)
    assert result["verdict"] == "truncated" and result["remedy"] == TRUNCATED_REMEDY
    assert result["truncated"] == 0.25 and result["groups_with_cut"] == 1.0 and result["length_correlation"] > 0.5
    worse = [[0.6, 0.6, 0.7, 0.0, 0.6, 0.7, 0.6, 0.0]] * 4  # cut ones fail the part: training learns to end
    assert judged(worse, cut=cut)["verdict"] == "learnable"
    mostly_cut = [[True, True, True, False] * 2] * 4  # most can't finish, whatever the part pays for
    assert judged(worse, cut=mostly_cut)["verdict"] == "truncated"


def test_group_sizes_need_two_completions():
    assert group_sizes([4, 8, 16], 6) == [4, 6, 8, 16]
    with pytest.raises(UserError, match=r"probe.group_sizes=\[1, 4\]: a group needs at least 2"):
        group_sizes([1, 4], 6)


def test_the_default_format_part_is_learnable():
    result = probed()
    (name,) = result["parts"]
    part = result["parts"][name]
    assert name == "format" and part["verdict"] == "learnable" and part["remedy"] is None
    assert 0 < part["mean"] < 1 and part["group_std"] > 0
    assert set(part["alike"]) == {"4", "6", "8"} and part["alike"]["8"] < 1
    assert (result["prompts"], result["samples_per_prompt"], result["num_generations"]) == (8, 8, 6)
    json.dumps(result)  # what --json prints
    text = format_probe(result)
    assert "format  learnable" in text and "8 training prompts x 8 completions" in text


def test_a_constant_part_is_flagged_flat_before_training():
    result = probed(CONSTANT)
    const = result["parts"]["const"]
    assert const["verdict"] == "flat" and const["mean"] == 1.0 and const["alike"]["6"] == 1.0
    assert const["remedy"] == FLAT_REMEDY.format(part="const")
    assert result["parts"]["format"]["verdict"] == "learnable"  # judged part by part
    assert "const: flat, no group differs" in format_probe(result)


def test_completions_cut_at_the_length_limit_are_flagged():
    result = probed("reward=content_creation", "dataset=content_creation", "grpo.max_completion_length=48")
    length = result["parts"]["length"]
    assert length["verdict"] == "truncated" and length["remedy"] == TRUNCATED_REMEDY
    assert length["groups_with_cut"] > 0.5 and length["length_correlation"] > 0
    assert result["truncated"] == length["truncated"]
