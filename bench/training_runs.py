"""What the learning benches share: a run config from the quickstart's, `clawgym train` and `clawgym eval`.

Not a bench itself. `bench/harness_transfer.py`, `bench/algorithms.py` and `bench/stability.py`
build each run's config from `QuickstartOptions.config()` (the quickstart's embedded defaults, absolute
paths) with their changes merged in, write it as the run folder's config.yaml, and run the installed
`clawgym train -c` / `clawgym eval -c` on it (subprocesses: each run is the CLI a user runs, and one
run's memory is gone before the next starts). Pass@1 of a part of the evaluated tasks (trained
families / unseen families) comes from the recorded per-task counts through the library's
`clawgym.report.summary.before_after`, as in a run's own summary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from clawgym.config import ClawgymConfig, load_config
from clawgym.evaluation.runner import EvalResult, HarnessEval
from clawgym.evaluation.select import HeldOut, held_out
from clawgym.report.run_folder import CONFIG_FILE
from clawgym.run import write_run_config as write_config
from clawgym_app.commands.quickstart import QuickstartOptions

CLAWGYM = Path(sys.executable).with_name("clawgym")
SUFFIXES = {"trained": "", "unseen": "_unseen_families"}  # the summary's key endings per held-out part

# the comparison benches' steps per run (algorithms, harness_transfer): the quickstart's batch and its
# old default; several runs of its 60 steps would not fit a 2-core session
STEPS = 24

# --toy: tiny-qwen3 (random weights: no learning expected), the plumbing end to end in minutes
TOY = QuickstartOptions(
    model="tiny-qwen3", steps=2, eval_tasks=2, eval_unseen_tasks=1, group_size=2, groups_per_step=2,
    max_new_tokens=16, concurrency=4, minutes=600.0, finetune="full",
)  # fmt: skip


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` merged in, dicts recursively (other values replaced)."""
    out = dict(base)
    for key, value in changes.items():
        out[key] = (
            merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def write_run_config(opts: QuickstartOptions, run_dir: Path, changes: dict[str, Any]) -> Path:
    """run_dir/config.yaml: the quickstart's config for `opts` with `changes` (nested dicts) merged in."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = ClawgymConfig(**merged(opts.config(run_dir).model_dump(mode="json"), changes))
    return write_config(run_dir, cfg)


def _last_json(argv: list[str], log: Path) -> dict[str, Any]:
    """Runs `argv` (stderr, the progress, into `log`) and returns its last stdout line as JSON."""
    with log.open("a") as err:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=os.environ)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[1:4])} failed with {done.returncode}; see {log}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def train(run_dir: Path) -> dict[str, Any]:
    """`clawgym train run_dir --json` (the folder holds the run's config.yaml): the run's summary."""
    return _last_json([str(CLAWGYM), "train", str(run_dir), "--json"], run_dir / "train.stderr.log")


def evaluate(run_dir: Path, checkpoint: int, harnesses: list[str], store: Path) -> EvalResult:
    """`clawgym eval -c run_dir/config.yaml --checkpoint V --harness H… --json`, recorded in `store`
    (one results store for a whole bench); the per-task counts per harness."""
    argv = [str(CLAWGYM), "eval", "-c", str(run_dir / CONFIG_FILE), "--checkpoint", str(checkpoint),
            "--store", f"sqlite:///{store}", "--json"]  # fmt: skip
    for h in harnesses:
        argv += ["--harness", h]
    out = _last_json(argv, run_dir / "eval.stderr.log")
    return EvalResult(
        out["suite"],
        out["version"],
        {h: HarnessEval.from_metrics(h, m) for h, m in out["harnesses"].items()},
        out["run_id"],
        out["seconds"],
    )


def capture_demonstrations(run_dir: Path, harnesses: list[str], task_ids: list[str], folder: Path) -> dict[str, Any]:
    """The oracle teacher's demonstrations of `task_ids` through each of `harnesses` (`clawgym eval`
    with `proxy.teacher.kind=oracle`, the run config's harness settings), recorded as one run in
    `folder`/clawgym.db, which `trainer.sft.source: folder` reads; the eval's JSON."""
    folder.mkdir(parents=True, exist_ok=True)
    argv = [str(CLAWGYM), "eval", "-c", str(run_dir / CONFIG_FILE), "--set", f"evaluation.task_ids={json.dumps(task_ids)}",
            "--set", "proxy.teacher.kind=oracle", "--store", f"sqlite:///{folder / 'clawgym.db'}", "--json"]  # fmt: skip
    for h in harnesses:
        argv += ["--harness", h]
    return _last_json(argv, folder / "capture.stderr.log")


def held_out_parts(run_dir: Path) -> HeldOut:
    """The run config's evaluated tasks split into trained-family instances and unseen families."""
    cfg = load_config(run_dir / CONFIG_FILE)
    return held_out(cfg.evaluation.suite or cfg.trainer.suite, cfg.trainer.tasks, cfg.evaluation.task_ids)


def interval(figures: dict[str, Any], key: str) -> str:
    """'0.250 [0.100, 0.450]' for a Pass@1 key of a summary (and its ci95_ key), '-' when absent."""
    if key not in figures:
        return "-"
    low, high = figures.get(key.replace("pass1_", "ci95_"), [float("nan")] * 2)
    return f"{figures[key]:.3f} [{low:.3f}, {high:.3f}]"
