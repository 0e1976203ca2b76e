"""docs/configuration.md's group table and docs/index.md's page list, checked against conf/, --help and mkdocs.yml,
so neither goes stale when a group, an option or a page is added."""

from __future__ import annotations

import re
import subprocess
import sys

import yaml

from grpo_exp.config.schema import CONF_DIR
from tests.conftest import ROOT

DOCS = ROOT / "docs"
# A row of the table: | `group` or `+group` | options | what it sets |
ROW = re.compile(r"^\| `(\+?)(\w+)` \| (.+?) \| .+ \|$")


def table() -> dict[str, tuple[bool, set[str], str | None]]:
    """group -> (added with +, its options, the one marked default) as docs/configuration.md lists them."""
    rows = {}
    for line in (DOCS / "configuration.md").read_text(encoding="utf-8").splitlines():
        if match := ROW.match(line):
            plus, group, options = match.groups()
            default = re.search(r"`(\w+)` \(default\)", options)
            rows[group] = (bool(plus), set(re.findall(r"`(\w+)`", options)), default.group(1) if default else None)
    return rows


def composed_defaults() -> dict[str, str]:
    """The groups conf/config.yaml composes, each with its default option."""
    entries = yaml.safe_load((CONF_DIR / "config.yaml").read_text(encoding="utf-8"))["defaults"]
    return {group: option for entry in entries if isinstance(entry, dict) for group, option in entry.items()}


def test_the_group_table_lists_every_group_and_option_of_conf():
    """Issue 62: the table lacked logger=trackio, dataset=reasoning_gym, recipes and four whole groups."""
    groups = {path.name: {f.stem for f in path.glob("*.yaml")} for path in CONF_DIR.iterdir() if path.is_dir()}
    documented = table()
    assert set(documented) == set(groups)
    defaults = composed_defaults()
    for group, options in groups.items():
        plus, listed, default = documented[group]
        assert listed == options, group
        assert plus == (group not in defaults), group
        if len(options) > 1 and group in defaults:
            assert default == defaults[group], group


def test_the_group_table_matches_run_py_help():
    shown = subprocess.run(
        [sys.executable, "run.py", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=120
    ).stdout
    listing = shown.split("== Config groups", 1)[1]
    groups_part = listing.split("\n\n\n")[0]  # up to the blank lines before the closing notes
    helped = dict(re.findall(r"^([a-z_]+): (.+)$", groups_part, flags=re.MULTILINE))
    documented = table()
    assert set(helped) == set(documented)
    for group, options in helped.items():
        assert set(options.split(", ")) == documented[group][1], group
    plus = re.search(r"`\+` for ([\w, ]+)\)", listing).group(1).split(", ")
    assert set(plus) == {group for group, (added, _, _) in documented.items() if added}


def test_the_home_page_links_every_page_of_the_site():
    """Issue 62: docs/index.md omitted the tasks page."""
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("markdown_extensions:")[0])["nav"]
    pages = {page for entry in nav for page in entry.values()} - {"index.md"}
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", (DOCS / "index.md").read_text(encoding="utf-8")))
    assert pages <= linked, sorted(pages - linked)
