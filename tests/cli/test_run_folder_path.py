"""A newcomer's path through one run folder, with the real CLI: `clawgym train -c X`, Ctrl-C,
`clawgym train RUN --resume`, then `eval RUN --checkpoint N`, `export RUN` and `browse RUN` —
everything of the run (config, store, checkpoints, report, log) in `runs/<run_name>/`, and a refused
start leaving no folder behind."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from clawgym_app.runtime.services import free_port
from tests.cli.conftest import CLAWGYM

pytestmark = pytest.mark.slow

# A tiny step takes about a second: enough of them that Ctrl-C, sent once the first checkpoint
# is seen, lands well before the last step.
STEPS = 8


def newcomer_config(tmp_path: Path, **trainer) -> Path:
    """A config naming no store and no checkpoint folder: the run keeps both in its folder."""
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "proxy": {"max_new_tokens": 8},
        "trainer": {"model": "tiny-qwen3", "run_name": "first", "steps": 3, "group_size": 2,
                    "groups_per_step": 1, "keep_checkpoints": 3, "sweep_interval_s": 1.0, **trainer},
        "evaluation": {"tasks": 1},
    }))  # fmt: skip
    return path


def wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(
                f"{what}: the process ended first ({proc.returncode}):\n{proc.stdout.read()}"
            )
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.5)


def test_train_interrupt_resume_eval_export_and_browse_share_one_run_folder(clawgym, tmp_path):
    config = newcomer_config(tmp_path, steps=STEPS)
    folder = tmp_path / "runs" / "first"
    proc = subprocess.Popen(
        [str(CLAWGYM), "train", "-c", str(config)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        first = folder / "checkpoints" / "first" / "v000001"
        wait_for(first.is_dir, 600, "the first checkpoint", proc)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, f"Ctrl-C ends the run early with 130:\n{out}"
    assert f"clawgym train {Path('runs') / 'first'} --resume" in out.replace("\n", ""), (
        f"Ctrl-C says how to go on:\n{out}"
    )
    assert "stopped at version" in out and "checkpoint is kept" in out, out
    partial = json.loads((folder / "summary.json").read_text())
    assert 1 <= partial["steps"] < STEPS and "pass1_after" not in partial, f"a partial report: {partial}"
    assert (folder / "report.md").is_file()
    saved = yaml.safe_load((folder / "config.yaml").read_text())
    assert saved["store"]["url"] == f"sqlite:///{folder / 'clawgym.db'}", saved["store"]
    assert saved["trainer"]["checkpoint_uri"] == str(folder / "checkpoints"), saved["trainer"]

    done = clawgym("train", "runs/first", "--resume", "--json")
    assert done.returncode == 0, f"resume from the folder:\n{done.stdout}\n{done.stderr}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == STEPS and "pass1_after" in summary and summary["run_dir"] == "runs/first", summary
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["first"], "one folder throughout"
    held = {p.name for p in folder.iterdir()}
    assert {"config.yaml", "clawgym.db", "checkpoints", "report.md", "summary.json", "run.log"} <= held, held

    evaluated = clawgym("eval", "runs/first", "--checkpoint", str(STEPS), "--json")
    assert evaluated.returncode == 0, f"eval RUN --checkpoint:\n{evaluated.stdout}\n{evaluated.stderr}"
    assert json.loads(evaluated.stdout.strip().splitlines()[-1])["version"] == STEPS, evaluated.stdout

    exported = clawgym("export", "runs/first", "--format", "jsonl", "--out", str(tmp_path / "export"))
    assert exported.returncode == 0, f"export RUN:\n{exported.stdout}\n{exported.stderr}"
    assert (tmp_path / "export" / "calls.jsonl").stat().st_size > 0

    port = free_port()
    browser = subprocess.Popen(
        [str(CLAWGYM), "browse", "runs/first", "--port", str(port)], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        runs: list = []

        def answers() -> bool:
            nonlocal runs
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/runs", timeout=2) as r:
                    runs = json.loads(r.read())
                return True
            except OSError:
                return False

        wait_for(answers, 120, "the browser answering", browser)
    finally:
        browser.terminate()
        browser.wait(timeout=30)
    names = [r.get("name") for r in (runs["runs"] if isinstance(runs, dict) else runs)]
    assert "first" in names, f"browse RUN shows the run: {runs}"


def test_a_refused_start_leaves_no_folder_and_a_run_folder_is_not_taken_for_a_new_run(clawgym, tmp_path):
    config = newcomer_config(tmp_path, model="Qwen/Qwen3-4B")  # a hub id: refused before a step
    refused = clawgym("train", "-c", str(config))
    assert refused.returncode == 2, f"{refused.stdout}\n{refused.stderr}"
    assert "hub id" in refused.stdout + refused.stderr, refused.stdout
    assert not (tmp_path / "runs" / "first").exists(), "a refused start leaves no folder"

    (tmp_path / "runs" / "kept").mkdir(parents=True)
    (tmp_path / "runs" / "kept" / "config.yaml").write_text(config.read_text())
    both = clawgym("train", "runs/kept", "-c", str(config))
    assert both.returncode == 2 and "is a run folder" in both.stdout + both.stderr, both.stdout
    assert (tmp_path / "runs" / "kept" / "config.yaml").is_file(), "the existing folder is left as it was"
