"""The shell script a pod's `reset_dir` runs, run here by the same `sh` on a real tree (no cluster)."""

import os
import subprocess
from pathlib import Path

from clawgym.sandbox.kubernetes import _RESET


def test_the_pod_reset_script_empties_a_dir_around_its_nested_mounts_and_follows_no_link(tmp_path: Path):
    home, outside = tmp_path / "root", tmp_path / "outside"
    workspace = home / ".openclaw" / "workspace"  # a nested writable dir: its own mount in the pod
    workspace.mkdir(parents=True)
    (workspace / "out.txt").write_text("the agent's output\n")
    (home / ".openclaw" / "openclaw.json").write_text("{}")
    (home / ".local" / "lib").mkdir(parents=True)
    (home / ".local" / "lib" / "usercustomize.py").write_text("evil\n")
    (home / "..dots").write_text("x")
    (home / "with space").mkdir()
    (home / "locked").mkdir()
    (home / "locked" / "f").write_text("x")
    os.chmod(home / "locked", 0o000)
    outside.mkdir()
    (outside / "keep.txt").write_text("not the sandbox's\n")
    os.symlink(outside, home / "link")

    done = subprocess.run(["sh", "-c", _RESET, "reset", str(home), str(workspace)], capture_output=True)
    assert done.returncode == 0, done.stderr
    left = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert left == [".openclaw", ".openclaw/workspace", ".openclaw/workspace/out.txt"], left
    assert (outside / "keep.txt").is_file(), "a link is removed, never followed"
