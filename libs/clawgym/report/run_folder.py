"""A run's folder (`runs/<timestamp>/`): what each file holds, and writing the ones a run writes itself.

    run.log                      every log record of the run (the terminal shows progress only)
    config.yaml                  the whole config the run used (`ClawgymConfig(**yaml.safe_load(...))`)
    summary.json                 the headline figures (`clawgym.report.summary`), plus where and how long
    report.md, report.json, *.png  the report (`clawgym.report.write_report`)
    clawgym.db, checkpoints/     the quickstart's SQLite store and checkpoints (a config may put them elsewhere)

Does not own what is inside `checkpoints/` (`clawgym.trainer.checkpoint`) or the report's files.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

RUNS_ROOT = "runs"
LOG_FILE = "run.log"
CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"
STORE_FILE = "clawgym.db"
CHECKPOINTS_DIR = "checkpoints"


def new_run_dir(root: str | Path = RUNS_ROOT) -> Path:
    """Creates runs/<YYYYmmdd-HHMMSS>/ (a `-N` suffix if that exists already) and returns it."""
    base = Path(root) / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        path, n = base.with_name(f"{base.name}-{n}"), n + 1
    path.mkdir(parents=True)
    return path


def store_url(folder: Path) -> str:
    """The SQLAlchemy URL of a SQLite store kept in the run folder."""
    return f"sqlite:///{folder / STORE_FILE}"


def write_config(folder: Path, config: BaseModel) -> Path:
    """Writes config.yaml: the config as JSON-compatible YAML, in field order."""
    path = folder / CONFIG_FILE
    path.write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return path


def write_summary(folder: Path, summary: dict[str, Any]) -> Path:
    """Writes summary.json (indented, one trailing newline)."""
    path = folder / SUMMARY_FILE
    path.write_text(json.dumps(summary, indent=2) + "\n")
    return path
