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
