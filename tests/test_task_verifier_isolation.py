"""Task verifiers run the model's answer (issue 60, finding 1): what a hostile answer did in the trainer,
against reasoning-gym's real verifiers, and that it now does nothing there.

n_queens ``eval()``s the answer; simple_integration hands it to ``sympy.parse_expr``, which evals.
The first test shows each attack working on the bare verifier (in a throw-away interpreter), so the
others, which send the same answers through the reward, prove something."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from grpo_exp.errors import UserError
from grpo_exp.rewards.task import task_accuracy
from grpo_exp.tasks import verifier
from grpo_exp.tasks.problems import Region, draw
from grpo_exp.tasks.verifier import shared_verifier

# What made a wrong integral score 1.0 for every later reply in the same trainer: sympy.simplify replaced
# by a function returning 0 for any non-zero expression.
PATCH_SYMPY = "setattr(__import__('sympy'), 'simplify', [0].count)"
LIMIT_S = 2.0  # the answers' time limit in these tests


def problem(task: str) -> dict:
    return draw(task, {}, seed=0, count=1, region=Region(0.0, held_out=False))[0]


@pytest.fixture(scope="module")
def queens() -> dict:
    return problem("n_queens")


@pytest.fixture(scope="module")
def integral() -> dict:
    return problem("simple_integration")


def scores(entry: dict, answers: list[str], timeout_s: float = LIMIT_S) -> list[float]:
    """The accuracy part's scores for replies holding ``answers``, as the trainer calls it."""
    replies = [f"<answer>{answer}</answer>" for answer in answers]
    return task_accuracy(
        replies, task_entry=[json.dumps(entry)] * len(replies), tag="answer", timeout_s=timeout_s, isolation="auto"
    )


def test_the_attacks_work_on_the_bare_verifiers(tmp_path, queens, integral):
    """The control: in-process (as before), a reply writes a file, patches sympy for the next and ends the run."""
    script = textwrap.dedent(f"""
        import json, sys
        from reasoning_gym import get_score_answer_fn
        queens, integral = json.loads(sys.argv[1]), json.loads(sys.argv[2])
        n_queens, integration = get_score_answer_fn("n_queens"), get_score_answer_fn("simple_integration")
        n_queens("open({str(tmp_path / "written")!r}, 'w').write('x')", queens)
        print(integration("x", integral), end=" ")
        integration({PATCH_SYMPY!r}, integral)
        print(integration("x", integral), flush=True)
        n_queens("exit(3)", queens)
        print("not reached")
    """)
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(queens), json.dumps(integral)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 3
    assert done.stdout.split() == ["0.0", "1.0"]  # a wrong integral, before and after the patch
    assert (tmp_path / "written").exists()


def test_a_right_answer_scores_one_and_a_wrong_one_zero():
    sums = draw("chain_sum", {}, seed=0, count=8, region=Region(0.0, held_out=False))
    replies = [f"<answer>{p['answer']}</answer>" for p in sums] + [f"<answer>{int(sums[0]['answer']) + 1}</answer>"]
    entries = [json.dumps(p) for p in [*sums, sums[0]]]
    got = task_accuracy(replies, task_entry=entries, tag="answer", timeout_s=LIMIT_S, isolation="auto")
    assert got == [1.0] * 8 + [0.0]


def test_the_same_answer_to_the_same_problem_is_verified_once_and_shared(monkeypatch):
    """A group's completions often agree: one fork per distinct (problem, answer), its verdict to each."""
    first, second = draw("chain_sum", {}, seed=0, count=2, region=Region(0.0, held_out=False))
    right, wrong = first["answer"], str(int(first["answer"]) + 1)
    shared = shared_verifier("auto")
    asked: list[list[dict]] = []
    ask = shared._ask
    monkeypatch.setattr(shared, "_ask", lambda items, timeout_s: asked.append(items) or ask(items, timeout_s))
    got = shared.score([first, first, first, first, second], [right, right, wrong, right, right], LIMIT_S)
    assert got == [1.0, 1.0, 0.0, 1.0, float(right == second["answer"])]
    assert [(item["entry"]["question"], item["answer"]) for item in asked[0]] == [
        (first["question"], right),
        (first["question"], wrong),
        (second["question"], right),
    ]


def test_the_eval_and_parse_expr_tasks_still_score_their_own_answers(queens, integral):
    assert scores(queens, [queens["answer"]]) == [1.0]
    assert scores(integral, [integral["answer"], "x"]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("task", "answer"),
    [
        ("n_queens", "open({path!r}, 'w').write('x')"),
        ("n_queens", "__import__('os').system('touch {path}')"),
        ("simple_integration", "__import__('os').system('touch {path}')"),
        ("simple_integration", "__import__('pathlib').Path({path!r}).write_text('x')"),
    ],
)
def test_an_answer_writes_no_file(tmp_path, queens, integral, task, answer):
    written = tmp_path / "written"
    entry = {"n_queens": queens, "simple_integration": integral}[task]
    assert scores(entry, [answer.format(path=str(written))]) == [0.0]
    assert not written.exists()


def test_an_answer_that_exits_scores_zero_and_the_trainer_goes_on(queens, integral):
    assert scores(queens, ["exit(3)", "quit()", queens["answer"]]) == [0.0, 0.0, 1.0]
    assert scores(integral, ["exit(3)", integral["answer"]]) == [0.0, 1.0]


def test_an_answer_that_allocates_without_end_scores_zero(queens):
    """Stopped by its process's memory limit (the trainer's memory is not what it eats)."""
    assert scores(queens, ["[0] * 10**11", "'x' * 10**11", queens["answer"]]) == [0.0, 0.0, 1.0]


def test_a_runaway_answer_is_cut_at_the_time_limit(queens):
    """``any(iter(int, 1))`` never ends and allocates nothing: only the time limit stops it."""
    checker = shared_verifier()
    failures = checker.failures
    started = time.monotonic()
    assert scores(queens, ["any(iter(int, 1))", "10**10**7", queens["answer"]], timeout_s=1) == [0.0, 0.0, 1.0]
    assert time.monotonic() - started < 60  # it would never return otherwise
    assert checker.failures == failures + 2  # both stopped without a verdict, not judged wrong


def test_state_left_by_one_answer_does_not_reach_the_next(integral):
    """The patch that made every later wrong integral score 1.0 in the trainer, in one batch and the next."""
    assert scores(integral, [PATCH_SYMPY, "x", integral["answer"]]) == [0.0, 0.0, 1.0]
    assert scores(integral, ["x"]) == [0.0]


def _set_state(answer: str, entry: dict) -> float:
    verifier.LEFT_BEHIND = answer  # a global of the module, as an answer could set one in a shared worker
    return 0.5


def _read_state(answer: str, entry: dict) -> float:
    return 1.0 if getattr(verifier, "LEFT_BEHIND", None) is None else 0.0


def test_each_answer_gets_a_fresh_process_from_the_fork_server():
    """Whatever an answer's process changes (here a module global), the next answer's starts without it."""
    item = {"answer": "x", "entry": {}}
    assert verifier._verify_all([(_set_state, item), (_read_state, item), (_read_state, item)], 5.0) == [
        0.5,
        1.0,
        1.0,
    ]
    assert not hasattr(verifier, "LEFT_BEHIND")


def _forge(answer: str, entry: dict) -> float:
    """An answer that took over its process: a verdict written to every descriptor, in every form, then gone."""
    for fd in range(64):
        for message in (b"1.0", b"\x00" * verifier.TOKEN_BYTES + b"1.0", b'{"verdicts": [1.0], "failed": 0}\n'):
            with contextlib.suppress(OSError):
                os.write(fd, message)
    os._exit(0)


class _Posing(float):
    """A number that prints, converts and compares as 1.0 while it holds 0.0."""

    def __repr__(self) -> str:
        return "1.0"

    def __float__(self) -> float:
        return 1.0


def _pose(answer: str, entry: dict) -> float:
    return _Posing(0.0)


def test_a_verdict_written_by_the_answer_counts_for_nothing(queens):
    item = {"answer": "x", "entry": {}}
    assert verifier._verify_all([(_forge, item), (_pose, item)], 5.0) == [verifier.FAILED, 0.0]
    assert scores(queens, ["print(1.0)", 'print(\'{"verdicts": [1.0], "failed": 0}\')']) == [0.0, 0.0]


def _descendants(pid: int) -> set[int]:
    """Every live process below ``pid``."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def test_answers_killed_again_and_again_leave_no_process(queens):
    scores(queens, [queens["answer"]])  # the fork server is up
    before = _descendants(os.getpid())
    for _ in range(3):
        assert scores(queens, ["any(iter(int, 1))"] * 3, timeout_s=0.5) == [0.0] * 3
    assert _descendants(os.getpid()) == before


def test_a_fork_server_killed_mid_batch_is_replaced_and_the_batch_scored_one_by_one(queens):
    checker = shared_verifier()
    scores(queens, [queens["answer"]])
    before = len(_descendants(os.getpid()))
    server = checker.helper._proc
    restarts = checker.restarts
    killer = threading.Timer(0.5, os.killpg, (server.pid, signal.SIGKILL))  # bwrap and all under it
    killer.start()
    assert scores(queens, ["any(iter(int, 1))", queens["answer"], "x"]) == [0.0, 1.0, 0.0]
    killer.join()
    assert checker.restarts > restarts and checker.helper._proc is not server
    assert len(_descendants(os.getpid())) == before  # the new one in place of the old, nothing left over


ACCURACY = "reward.parts.accuracy.params"


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (f"{ACCURACY}.timeout_s=0", "task_accuracy: timeout_s must be seconds above 0"),
        (f"{ACCURACY}.timeout_s=inf", "task_accuracy: timeout_s must be seconds above 0"),
        (f"{ACCURACY}.isolation=docker", "task_accuracy: isolation must be one of auto, bwrap, unshare, none"),
    ],
)
def test_bad_verifier_settings_are_one_line_before_the_model_loads(override, says):
    from grpo_exp.job.command import CONF_DIR
    from grpo_exp.job.preflight import check_command

    with pytest.raises(UserError, match=says) as err:
        check_command(CONF_DIR, "config", ["dataset=reasoning_gym", "reward=reasoning_gym", override], multirun=False)
    assert "\n" not in str(err.value)
