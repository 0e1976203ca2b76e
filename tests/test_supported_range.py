"""pyproject's supported range: constraints/low.txt pins each declared lower bound (what `make test-low`
installs), and whichever stack is installed lies inside the declared range."""

from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

LOW = ROOT / "constraints" / "low.txt"
TRAINING_STACK = {"torch", "transformers", "trl", "peft", "accelerate"}


def dependencies() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {(r := Requirement(line)).name: r for line in project["dependencies"]}


def low_pins() -> dict[str, Version]:
    pins = {}
    for line in LOW.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip()] = Version(version)
    return pins


def lower_bound(requirement: Requirement) -> Version | None:
    return next((Version(s.version) for s in requirement.specifier if s.operator == ">="), None)


def test_the_low_constraints_pin_the_declared_lower_bounds():
    declared, pins = dependencies(), low_pins()
    assert pins.keys() >= TRAINING_STACK
    assert {name: lower_bound(declared[name]) for name in pins} == pins


def test_the_installed_stack_lies_inside_the_declared_range():
    outside = {}
    for name, requirement in dependencies().items():
        installed = Version(metadata.version(name))
        if Version(installed.base_version) not in requirement.specifier:  # a local build (+cpu) counts as its release
            outside[name] = str(installed)
    assert not outside, f"installed outside pyproject's range: {outside}"


LOCK = ROOT / "constraints" / "lock.txt"
TORCH_STACK = {"torch", "torchvision", "torchaudio", "triton"}


def lock_pins() -> dict[str, Version]:
    from packaging.utils import canonicalize_name

    pins = {}
    for line in LOCK.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_the_lock_pins_every_dependency_inside_the_declared_range_and_leaves_torch_to_torch():
    """constraints/lock.txt (`make lock`), what `make setup` installs: one version of each dependency, each
    inside pyproject's range; the torch stack is TORCH's choice (a CPU or a CUDA build)."""
    from packaging.utils import canonicalize_name

    pins = lock_pins()
    declared = {canonicalize_name(name): requirement for name, requirement in dependencies().items()}
    assert set(declared) - TORCH_STACK <= set(pins)
    assert not TORCH_STACK & set(pins) and not any(name.startswith("nvidia-") for name in pins)
    outside = {name: str(pins[name]) for name, r in declared.items() if name in pins and pins[name] not in r.specifier}
    assert not outside, f"the lock pins outside pyproject's range: {outside}"


def test_trl_and_transformers_admit_only_the_minor_releases_ci_tests():
    """Issue 53: grpo_exp/training/trl_private.py uses private names of theirs, so their range ends at the
    release after the one the lock holds (docs/stack.md: raise the pin, `make lock`, the contract test)."""
    declared, pins = dependencies(), lock_pins()
    assert str(declared["trl"].specifier) == "<1.17,>=1.16"
    for name in ("trl", "transformers"):
        upper = next(Version(s.version) for s in declared[name].specifier if s.operator == "<")
        assert pins[name] < upper and Version(f"{pins[name].major}.{pins[name].minor + 1}") == upper, name
