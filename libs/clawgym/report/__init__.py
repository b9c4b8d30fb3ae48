"""Run reports viewable without Grafana: `report.md` plus PNG plots in the run's folder.

`RunReport` holds the data (steps from the store, evaluations, stage timings, a summary);
`write_report(report, folder)` draws the plots (`plots`) and writes the markdown (`markdown`) and
`report.json` (the same data, for scripts). `summary` names a run's headline figures and
`run_folder` owns the layout of a run's folder (run.log, config.yaml, summary.json, the report).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from clawgym.report.data import EvalPoint, RunReport, series, steps_from_store


def write_report(report: RunReport, folder: str | Path) -> Path:
    """Writes report.md, report.json and the plots into `folder`; returns the markdown's path."""
    from clawgym.report import markdown, plots

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = plots.draw_all(report, folder)
    path = folder / "report.md"
    path.write_text(markdown.render(report, images))
    (folder / "report.json").write_text(json.dumps(asdict(report), indent=2, default=str) + "\n")
    return path


__all__ = ["EvalPoint", "RunReport", "series", "steps_from_store", "write_report"]
