"""grpo_exp/proc.py: /proc/<pid>/stat read in one place (the sandbox's kill paths and gpu_check's use it)."""

from __future__ import annotations

import os
import subprocess
import sys

from grpo_exp import proc


def test_stat_of_this_process_names_its_parent():
    found = proc.stat(os.getpid())
    assert found is not None and found.state in "RS" and found.parent == os.getppid()


def test_a_command_name_with_parentheses_and_spaces_parses(tmp_path, monkeypatch):
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "stat").write_bytes(b"7 (evil) Z 1 (x) S 99 7 7 0 -1 4194560\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "stat").write_bytes(b"8 (torn")
    monkeypatch.setattr(proc, "PROC", str(tmp_path))
    assert proc.stat(7) == proc.Stat("S", 99)
    assert proc.stat(8) is None and proc.is_zombie(8)
    assert proc.stat(9) is None and proc.is_zombie(9)
    assert proc.parents() == {7: 99} and proc.children(99) == [7]


def test_descendants_finds_grandchildren_and_zombies_are_seen():
    script = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); "
    script += "print('ready', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "ready\n"
        tree = proc.descendants(child.pid)
        assert tree[0] == child.pid and len(tree) == 2
        assert proc.children(child.pid) == tree[1:] and proc.stat(tree[1]).parent == child.pid
    finally:
        for pid in reversed(proc.descendants(child.pid)):
            os.kill(pid, 9)
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # ended, not yet reaped: a zombie
    assert proc.is_zombie(child.pid)
    child.wait()
    assert proc.is_zombie(child.pid)  # gone
