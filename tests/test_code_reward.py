"""The three code-generation reward parts, called the way the reward adapter calls them."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from grpo_exp.errors import UserError
from grpo_exp.rewards import code as code_rewards
from grpo_exp.rewards.registry import get
from grpo_exp.sandbox import extract_code

SANDBOX = {"timeout_s": 3.0, "test_timeout_s": 1.0, "memory_mb": 256, "workers": 2, "isolation": "auto"}

ADD = "```python\ndef add(a, b):\n    return a + b\n```"
HUMANEVAL_TEST = "def check(candidate):\n    assert candidate(2, 3) == 5\n    assert candidate(0, 0) == 0\n"


def _extras(n: int) -> dict:
    """What TRL passes besides the dataset columns; the parts must ignore it."""
    return {"prompts": ["p"] * n, "completion_ids": [[1]] * n, "trainer_state": None, "log_metric": print}


# -- extraction ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("Here:\n```python\nx = 1\n```\nand ```python\ny = 2\n```", "x = 1\n"),
        ("```text\nnot code\n```\n```py\nx = 1\n```", "x = 1\n"),
        ("```\nx = 1\n```", "x = 1\n"),
        ("```bash\nls\n```", "ls\n"),
        ("Sure!\n```python\ndef f():\n    return 1", "def f():\n    return 1"),  # cut off: runs to the end
        ("def f():\n    return 1\n", "def f():\n    return 1\n"),
    ],
)
def test_extract_code(completion, expected):
    assert extract_code(completion) == expected


# -- code_syntax -------------------------------------------------------------------------------------


def test_code_syntax_scores_parsable_code():
    completions = [ADD, "def f(:\n", "```python\n\n```", "x = 1", "print 'py2'"]
    assert get("code_syntax")(completions, **_extras(5)) == [1.0, 0.0, 0.0, 1.0, 0.0]


# -- code_tests --------------------------------------------------------------------------------------


def test_code_tests_grades_both_shapes_and_skips_samples_without_tests():
    completions = [ADD, "def add(a, b):\n    return a - b\n", ADD, "def plus(a, b):\n    return a + b", ADD]
    scores = get("code_tests")(
        completions,
        **SANDBOX,
        test_list=[["assert add(1, 2) == 3", "assert add(0, 0) == 0"]] * 2 + [None, None, []],
        test=[None, None, None, HUMANEVAL_TEST, None],
        entry_point=[None, None, None, "plus", None],
        test_setup_code=["", None, None, None, None],
        **_extras(5),
    )
    assert scores == [1.0, 0.5, None, 1.0, None]


def test_code_tests_without_test_columns_scores_nothing():
    assert get("code_tests")([ADD, ADD], **SANDBOX, **_extras(2)) == [None, None]


def test_code_tests_reuses_one_sandbox_per_settings_and_caches_results():
    tests = {"test_list": [["assert add(2, 2) == 4"]]}
    settings = SANDBOX | {"timeout_s": 2.5}
    get("code_tests")([ADD + "\n# reuse"], **settings, **tests, **_extras(1))
    sandboxes = dict(code_rewards._sandboxes)
    box = next(b for key, b in sandboxes.items() if key[0].timeout_s == 2.5)
    hits = box.cache_stats.hits
    assert get("code_tests")([ADD + "\n# reuse"], **settings, **tests, **_extras(1)) == [1.0]
    assert code_rewards._sandboxes == sandboxes
    assert box.cache_stats.hits == hits + 1


def test_code_tests_hostile_completion_scores_zero():
    hostile = "```python\nimport sys\nclass Yes:\n    def __eq__(self, o):\n        return True\n"
    hostile += "def add(a, b):\n    print('PASSED')\n    return Yes()\nsys.exit(0)\n```"
    scores = get("code_tests")([hostile], **SANDBOX, test_list=[["assert add(1, 2) == 3"]], **_extras(1))
    assert scores == [0.0]


def test_code_tests_rejects_bad_settings():
    with pytest.raises(UserError, match="isolation"):
        get("code_tests")([ADD], **(SANDBOX | {"isolation": "chroot"}), test_list=[["assert add(1, 1) == 2"]])
    with pytest.raises(UserError, match="timeout_s"):
        get("code_tests")([ADD], **(SANDBOX | {"timeout_s": 0}), test_list=[["assert add(1, 1) == 2"]])
    with pytest.raises(UserError, match="partial_credit"):
        get("code_tests")([ADD], **SANDBOX, partial_credit="yes", test_list=[["assert add(1, 1) == 2"]])


# -- code_complexity ---------------------------------------------------------------------------------

SIMPLE = "def add(a, b):\n    return a + b\n"
TANGLED = textwrap.dedent("""
    def f(x, y, z):
        r = 0
        for i in range(x):
            if i % 2 and y:
                r += 1
            elif i % 3 or z:
                r -= 1
            else:
                while r > 10 and y:
                    r //= 2
                    if r == 3 or z:
                        break
            if i > 5 and x < 3 or y > 2:
                r += i
            if r and z and x or y:
                r *= 2
        return r
""")


def test_code_complexity_prefers_simple_code_and_zeroes_broken_code():
    scores = get("code_complexity")([SIMPLE, TANGLED, "def f(:", ""], max_complexity=5, **_extras(4))
    simple, tangled, broken, empty = scores
    assert 0.5 < simple <= 1.0
    assert 0.0 < tangled < simple
    assert broken == empty == 0.0


def test_code_complexity_threshold_only_penalises_above_it():
    lenient = get("code_complexity")([TANGLED], max_complexity=50)[0]
    strict = get("code_complexity")([TANGLED], max_complexity=2)[0]
    assert strict < lenient
    assert get("code_complexity")([SIMPLE], max_complexity=50) == get("code_complexity")([SIMPLE], max_complexity=2)
    with pytest.raises(UserError):
        get("code_complexity")([SIMPLE], max_complexity=0)


def test_importing_the_code_rewards_is_cheap():
    probe = "import sys, grpo_exp.rewards.code; print(sorted({'torch', 'radon', 'trl'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
