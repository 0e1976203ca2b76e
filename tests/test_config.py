"""Every config option composes into the typed schema; typos and wrong types fail at compose time."""

from __future__ import annotations

import importlib.util

import pytest

from grpo_exp import hardware
from grpo_exp.config.schema import ExperimentConfig
from grpo_exp.errors import UserError
from grpo_exp.job.command import CONF_DIR
from grpo_exp.spec import build_spec
from tests.conftest import FIXTURES, ROOT

# Options that need one more value to be complete, as a user would give it.
EXTRA = {
    "dataset/json": [f"dataset.path={FIXTURES / 'prompts.json'}"],
    "dataset/hub": ["dataset.name=trl-lib/tldr"],
    "reward/custom": [f"reward.parts.main.fn={FIXTURES / 'article_rewards.py'}:reward_customer_service"],
    "reward/support_agent": ["dataset=support_agent", "agent=support"],  # the agent's columns and tools
    "reward/support_env": ["dataset=support_env", "agent=support_env", "model=tiny_store"],  # the store and a
    # model warmed up acting in it
    "reward/math": ["dataset=gsm8k_sample"],  # a dataset with a reference answer per record
    # a task entry per problem, for its verifier, and a model warmed up on the task's replies
    "reward/reasoning_gym": ["dataset=reasoning_gym", "model=tiny_arithmetic"],
    "model/tiny_arithmetic": ["dataset=reasoning_gym"],  # warmed up on the dataset's task
}
GROUPS = sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir())
OPTIONS = [f"{g}/{f.stem}" for g in GROUPS for f in sorted((CONF_DIR / g).glob("*.yaml"))]
# Groups that are not in config.yaml's defaults list are added with `+`.
OPTIONAL_GROUPS = {"recipe", "launcher", "sweep", "variant"}
# Options that need an optional extra: the plugin module to look for.
NEEDS_PLUGIN = {"sweep/optuna": "hydra_plugins.hydra_optuna_sweeper"}


def test_every_group_has_options():
    assert {"model", "dataset", "reward", "optimizer", "grpo", "logger", "monitor"} <= set(GROUPS)
    assert len(OPTIONS) >= 15


@pytest.mark.parametrize("option", OPTIONS)
def test_every_option_composes_and_validates(settings, option):
    if option in NEEDS_PLUGIN and not importlib.util.find_spec(NEEDS_PLUGIN[option]):
        pytest.skip(f"{option} needs {NEEDS_PLUGIN[option]} (an optional extra)")
    group, name = option.split("/")
    prefix = "+" if group in OPTIONAL_GROUPS else ""
    cfg = settings(f"{prefix}{group}={name}", *EXTRA.get(option, []))
    assert isinstance(cfg, ExperimentConfig)
    if cfg.model.quantization.load_in_4bit and not hardware.cuda_available():
        pytest.skip("4-bit needs a GPU")
    build_spec(cfg)


def test_defaults_are_the_tiny_model_on_customer_service(settings):
    cfg = settings()
    assert (cfg.model.source, cfg.dataset.name, list(cfg.reward.parts)) == ("tiny", "customer_service", ["format"])
    assert cfg.grpo.num_generations == 6 and cfg.grpo.beta > 0
    assert cfg.optimizer.lr == pytest.approx(5e-4)  # the tiny model's own rate, not the article's 2e-5


def test_real_models_keep_the_articles_learning_rate(settings):
    cfg = settings("model=qwen2_5_0_5b_instruct")
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.optimizer.lr == pytest.approx(2e-5)
    assert settings("model=mistral_7b_instruct").model.lora.enabled


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("grpo.num_generation=4", "unknown config key grpo.num_generation; did you mean grpo.num_generations?"),
        ("grpo.kl_coef=0.1", "did you mean grpo.beta?"),
        ("grpo.lr=1e-5", "did you mean optimizer.lr?"),
        ("optimizer.learnig_rate=1e-5", "did you mean optimizer.lr?"),
        ("grpo.num_generations=abc", "grpo.num_generations: Value 'abc' of type 'str' could not be converted"),
        ("model=tinyy", "no model config named 'tinyy'; did you mean model=tiny? available: codellama_7b_instruct, "),
        ("reward=custom", "reward.parts.main.fn is required"),
        ("+reward.parts.x={fn: a.b, wieght: 1}", "reward.parts.x: Key 'wieght' not in 'RewardPart'"),
        ("grpo.beta=${grpo.nope}", "Interpolation key 'grpo.nope' not found; full_key: grpo.beta"),
        (
            "reward.parts.format.params.pattern=${grpo.nope}",
            "Interpolation key 'grpo.nope' not found; full_key: reward.parts.format.params.pattern",
        ),
    ],
)
def test_config_mistakes_are_one_line(override, message):
    from grpo_exp.job.preflight import check_command

    with pytest.raises(UserError) as err:
        check_command(CONF_DIR, "config", [override], multirun=False)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


TESTS_PARAMS = "reward.parts.tests.params"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (f"{TESTS_PARAMS}.fork_server=yes", "code_tests: fork_server must be true or false, got 'yes'"),
        (f"{TESTS_PARAMS}.partial_credit=2", "code_tests: partial_credit must be true or false, got 2"),
        (f"{TESTS_PARAMS}.isolation=chroot", "isolation must be one of auto, bwrap, unshare, none, got 'chroot'"),
        (f"{TESTS_PARAMS}.workers=0", "code_tests: workers must be a whole number from 1, or null (one per core)"),
        (f"{TESTS_PARAMS}.timeout_s=0", "code_tests: sandbox limit timeout_s must be positive, got 0.0"),
        (f"~{TESTS_PARAMS}.memory_mb", "code_tests: missing 1 required keyword-only argument: 'memory_mb'"),
        ("reward.parts.complexity.params.max_complexity=0", "code_complexity: max_complexity must be positive"),
    ],
)
def test_a_reward_part_checks_its_params_in_the_preflight(override, message):
    """Refused before any job starts (so before a model loads), not at the part's first call."""
    from grpo_exp.job.preflight import check_command

    with pytest.raises(UserError) as err:
        check_command(CONF_DIR, "config", ["+recipe=code_generation", override], multirun=False)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


# The presets with the most jobs take a minute or two each to check: the e2e tier (make test-e2e) checks them.
LONG_PRESETS = {"group_size_lr_seeds", "stability_variants", "optuna"}


@pytest.mark.parametrize(
    "sweep",
    [
        pytest.param(name, marks=pytest.mark.e2e) if name in LONG_PRESETS else name
        for name in sorted(p.stem for p in (CONF_DIR / "sweep").glob("*.yaml"))
    ],
)
def test_every_sweep_preset_expands_into_valid_jobs(sweep):
    from grpo_exp.job.preflight import check_command, job_overrides

    plugin = NEEDS_PLUGIN.get(f"sweep/{sweep}")
    if plugin and not importlib.util.find_spec(plugin):
        pytest.skip(f"needs {plugin} (an optional extra)")
    check_command(CONF_DIR, "config", [f"+sweep={sweep}"], multirun=True)
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = list(job_overrides("config", [f"+sweep={sweep}"]))
    assert len(jobs) >= 2
    assert all(any(o.startswith(("grpo.num_generations=", "+variant=")) for o in job) for job in jobs)


def test_wandb_sweep_calls_run_py_with_valid_overrides():
    import yaml

    from grpo_exp.job.preflight import check_command

    spec = yaml.safe_load((ROOT / "sweeps" / "wandb" / "group_size_lr.yaml").read_text())
    assert spec["program"] == "run.py" and "${args_no_hyphens}" in spec["command"]
    params = spec["parameters"]
    grid = [
        f"{k}={','.join(map(str, p['values']))}" if "values" in p else f"{k}={p['value']}" for k, p in params.items()
    ]
    check_command(CONF_DIR, "config", grid, multirun=True)
