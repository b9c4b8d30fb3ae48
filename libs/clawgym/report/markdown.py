"""The run report as markdown (`report.md`), readable in any viewer, with the PNG plots beside it.

Owns the layout: headline summary, evaluations (Pass@k with 95% intervals per harness × version),
stage timings, a per-step table of the training diagnostics, the plots, the settings.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawgym.report.data import RunReport

STEP_COLUMNS = (
    ("step", "step", "{:d}"),
    ("stage", "stage", "{}"),  # "sft" on supervised steps, empty on RL ones
    ("reward", "reward", "{:.3f}"),
    ("pass_rate", "pass", "{:.3f}"),
    ("loss", "loss", "{:.4f}"),
    ("approx_kl", "KL", "{:.4f}"),
    ("entropy", "entropy", "{:.3f}"),
    ("logprob_mismatch", "mean abs Δlogp", "{:.4f}"),
    ("sharing_ratio", "sharing", "{:.2f}"),
    ("groups", "groups", "{:d}"),
    ("groups_dropped", "dropped", "{:d}"),
    ("rollout_wait_s", "rollouts s", "{:.1f}"),
    ("update_s", "update s", "{:.1f}"),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return ""
    try:
        return fmt.format(int(value) if fmt == "{:d}" else float(value))
    except (TypeError, ValueError):
        return str(value)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def render(report: RunReport, images: list[Path]) -> str:
    """The markdown text; `images` are the PNGs (relative to the report's folder)."""
    out = [f"# {report.title}", "", f"Run `{report.run_id}`.", ""]
    if report.summary:
        figures = {k: v for k, v in report.summary.items() if k not in ("held_out", "per_family")}
        out += [
            "## Summary",
            "",
            *_table(["figure", "value"], [[k, _summary_value(v)] for k, v in figures.items()]),
            "",
        ]
        out += _held_out(report.summary)
    if report.evals:
        ks = sorted({k for e in report.evals for k in e.pass_at})
        header = ["when", "version", "harness", "suite", "tasks", "samples", *(f"Pass@{k} (95% CI)" for k in ks),
                  "mean reward", "infra failures"]  # fmt: skip
        rows = [
            [
                e.label,
                str(e.version),
                e.harness,
                e.suite,
                str(e.tasks),
                str(e.samples),
                *(
                    f"{e.pass_at[k]:.3f} [{e.ci95[k][0]:.3f}, {e.ci95[k][1]:.3f}]" if k in e.pass_at else ""
                    for k in ks
                ),
                f"{e.mean_reward:.3f}",
                str(e.infra_failures),
            ]
            for e in report.evals
        ]
        out += ["## Evaluations", "", *_table(header, rows), ""]
        hybrid = [e for e in report.evals if e.hybrid]
        if hybrid:  # which part of the hybrid tasks' rewards came from the code, which from the judge
            rows = [
                [e.label, str(e.version), e.harness, str(h["judged"]), _cell(h["mean_code"], "{:.3f}"),
                 _cell(h["mean_rubric"], "{:.3f}"), str(h["not_judged"]), str(h["judge_failures"])]
                for e in hybrid
                for h in [e.hybrid or {}]
            ]  # fmt: skip
            header = ["when", "version", "harness", "judged", "mean code part", "mean rubric part",
                      "not judged", "judge failures"]  # fmt: skip
            out += ["## Hybrid rewards (code checks + rubric judge)", "", *_table(header, rows), ""]
    if report.stages:
        total = sum(report.stages.values())
        rows = [
            [name, f"{s:.1f}", f"{100 * s / total:.0f}%" if total else ""]
            for name, s in report.stages.items()
        ]
        out += ["## Stages (wall time)", "", *_table(["stage", "seconds", "share"], rows), ""]
    if images:
        out += ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in images] + [""]
    if report.steps:
        columns = [c for c in STEP_COLUMNS if any(c[0] in s for s in report.steps)]
        rows = [[_cell(s.get(key), fmt) for key, _, fmt in columns] for s in report.steps]
        out += ["## Training steps", "", *_table([name for _, name, _ in columns], rows), ""]
        harnesses = report.harnesses()
        if len(harnesses) > 1:
            rows = [
                [str(s.get("step"))]
                + [
                    _cell(s.get(f"harness/{h}/{m}"), "{:.3f}")
                    for h in harnesses
                    for m in ("reward", "pass_rate")
                ]
                for s in report.steps
            ]
            header = ["step", *(f"{h} {m}" for h in harnesses for m in ("reward", "pass"))]
            out += ["### Per harness", "", *_table(header, rows), ""]
    if report.notes:
        out += ["## Notes", "", *(f"- {n}" for n in report.notes), ""]
    if report.settings:
        out += ["## Settings", "", "```json", json.dumps(report.settings, indent=2, default=str), "```", ""]
    return "\n".join(out)


def _held_out(summary: dict[str, Any]) -> list[str]:
    """What each held-out figure means, and Pass@1 per family (the summary's `held_out`, `per_family`)."""
    out: list[str] = []
    if summary.get("held_out"):
        rows = [
            [f"`pass1_*{suffix}`" if suffix else "`pass1_*`", text]
            for suffix, text in summary["held_out"].items()
        ]
        out += [
            "### What the held-out figures share with training",
            "",
            *_table(["keys", "held-out set"], rows),
            "",
        ]
    families = summary.get("per_family") or {}
    if families:
        apart = ("kind", "tasks", "shares")
        labels = list(dict.fromkeys(k for row in families.values() for k in row if k not in apart))
        rows = [
            [family, _kind(row), str(row["tasks"]), *(_cell(row.get(label), "{:.3f}") for label in labels)]
            for family, row in sorted(families.items(), key=lambda kv: (kv[1]["kind"], kv[0]))
        ]
        out += ["### Pass@1 per family", "", *_table(["family", "kind", "tasks", *labels], rows), ""]
    return out


def _kind(row: dict[str, Any]) -> str:
    """A family's kind; for one never trained on, whether it is a sibling (and of what) or a new skill."""
    share = row.get("shares")
    if not share:
        return row["kind"]
    if not share["sibling"]:
        return f"{row['kind']}, new skill"
    same = f", answer shape of {share['same_shape']}/{share['solutions']}" if share["same_shape"] else ""
    return f"{row['kind']}, sibling: {' '.join(share['programs'] + share['flags'])}{same}"


def _summary_value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    if isinstance(v, list | tuple) and all(isinstance(x, float) for x in v):
        return "[" + ", ".join(f"{x:.3f}" for x in v) + "]"
    return str(v)
