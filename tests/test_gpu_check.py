"""benchmarks/gpu_check.py, the parts that run without a GPU: its refusal and its offline tokenizer."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from grpo_exp import hardware
from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(hardware.cuda_available(), reason="this machine has a GPU: the check would run")
def test_without_a_gpu_it_refuses_in_one_line():
    result = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == ["error: no CUDA GPU visible: this check needs one (on a CPU, "
                                                  "--smoke checks the script itself)"]  # fmt: skip


def test_the_made_up_tokenizer_has_the_asked_size_and_round_trips_text():
    script = load_script()
    size = 256 + 256**2 + 8  # the bytes, every pair of them, a few triples
    tokenizer = script.build_tokenizer(size)
    assert len(tokenizer) == size + len(script.SPECIAL_TOKENS)
    text = "Question 3: explain step 3 of the plan. 您好"
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.decode(ids) == text and len(ids) < len(text.encode())  # the merges apply
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") == size + 2 and tokenizer.eos_token == "<|im_end|>"
