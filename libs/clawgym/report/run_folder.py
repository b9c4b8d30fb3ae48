"""A run's folder (`runs/<run_name or timestamp>/`): what each file holds, and writing the ones a run
writes itself. Every command that takes a run takes this folder (`train --resume`, `eval`, `browse`,
`export`).

    run.log                      every log record of the run (the terminal shows progress only)
    config.yaml                  the resolved config (absolute paths, secrets left out: `clawgym.run.write_run_config`)
    summary.json                 the headline figures (`clawgym.report.summary`), plus where and how long
    report.md, report.json, *.png  the report (`clawgym.report.write_report`)
    tensorboard/                 TensorBoard event files (`tracking.tensorboard`)
    clawgym.db, checkpoints/     the SQLite store and the checkpoints, unless the config puts them elsewhere

Does not own what is inside `checkpoints/` (`clawgym.trainer.checkpoint`) or the report's files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

RUNS_ROOT = "runs"
LOG_FILE = "run.log"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
STORE_FILE = "clawgym.db"
CHECKPOINTS_DIR = "checkpoints"


def fresh_run_dir(root: str | Path = RUNS_ROOT) -> Path:
    """runs/<YYYYmmdd-HHMMSS>/ (a `-N` suffix if that exists already), not created yet."""
    base = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    return path


def new_run_dir(root: str | Path = RUNS_ROOT) -> Path:
    """Creates `fresh_run_dir(root)` and returns it."""
    path = fresh_run_dir(root)
    path.mkdir(parents=True)
    return path


def store_url(folder: Path) -> str:
    """The SQLAlchemy URL of a SQLite store kept in the run folder."""
    return f"sqlite:///{folder / STORE_FILE}"


def folder_store_url(folder: Path) -> str:
    """The store URL of a run folder: its clawgym.db, else the store.url its config.yaml names; ''
    when it has neither (not a run folder)."""
    if (folder / STORE_FILE).is_file():
        return store_url(folder)
    config = folder / CONFIG_FILE
    if config.is_file():
        import yaml

        return str(((yaml.safe_load(config.read_text()) or {}).get("store") or {}).get("url", ""))
    return ""


def write_summary(folder: Path, summary: dict[str, Any]) -> Path:
    """Writes summary.json (indented, one trailing newline)."""
    path = folder / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
