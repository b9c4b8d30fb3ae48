"""The run report's PNG plots (matplotlib, Agg backend: no display needed).

Owns drawing: reward and pass rate per harness over steps (with evaluation Pass@1 and its 95%
interval), KL, entropy and clip fraction, the train/engine logprob mismatch, and tree sharing. Each function
writes one PNG and returns its path, or None when the run has no data for it.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: render to files only
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from clawgym.report.data import RunReport, series

COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
DPI = 110


def _figure(ncols: int, title: str):
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols, 3.8), squeeze=False)
    fig.suptitle(title, fontsize=12)
    return fig, axes[0]


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _line(ax, xs, ys, label: str, colour: str, marker: str = "o") -> None:
    ax.plot(xs, ys, marker=marker, markersize=3.5, linewidth=1.4, label=label, color=colour)


def reward_and_pass_rate(report: RunReport, path: Path) -> Path | None:
    """Training reward and pass rate per harness over steps; evaluation Pass@1 with 95% CIs."""
    harnesses = report.harnesses()
    if not report.steps and not report.evals:
        return None
    fig, (ax_r, ax_p) = _figure(2, "Reward and pass rate per harness")
    for i, harness in enumerate(harnesses):
        colour = COLOURS[i % len(COLOURS)]
        xs, ys = series(report.steps, f"harness/{harness}/reward")
        if xs:
            _line(ax_r, xs, ys, f"{harness} (train)", colour)
        xs, ys = series(report.steps, f"harness/{harness}/pass_rate")
        if xs:
            _line(ax_p, xs, ys, f"{harness} train batch", colour)
        points = [e for e in report.evals if e.harness == harness and 1 in e.pass_at]
        if points:
            vx = [e.version for e in points]
            vy = [e.pass_at[1] for e in points]
            # clamped: an interval's bound can miss its estimate by rounding (0 vs 1e-17), and
            # matplotlib refuses a negative error bar
            low = [max(0.0, e.pass_at[1] - e.ci95[1][0]) for e in points]
            high = [max(0.0, e.ci95[1][1] - e.pass_at[1]) for e in points]
            ax_p.errorbar(vx, vy, yerr=[low, high], fmt="s", capsize=5, markersize=7, color=colour,
                          markeredgecolor="black", label=f"{harness} held-out Pass@1 (95% CI)")  # fmt: skip
    for ax, name in ((ax_r, "mean reward of the step's rollouts"), (ax_p, "pass rate")):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlim(left=-0.3)
        ax.set_xlabel("step (= policy version)")
        ax.set_ylabel(name)
        ax.set_ylim(-0.03, 1.03)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def _metric_panels(
    report: RunReport, path: Path, title: str, panels: list[tuple[str, list[str]]]
) -> Path | None:
    drawn = [(name, [k for k in keys if series(report.steps, k)[0]]) for name, keys in panels]
    drawn = [(name, keys) for name, keys in drawn if keys]
    if not drawn:
        return None
    fig, axes = _figure(len(drawn), title)
    for ax, (name, keys) in zip(axes, drawn, strict=True):
        for j, key in enumerate(keys):
            xs, ys = series(report.steps, key)
            _line(ax, xs, ys, key, COLOURS[j % len(COLOURS)])
        ax.set_title(name, fontsize=10)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    return _save(fig, path)


def kl_and_entropy(report: RunReport, path: Path) -> Path | None:
    """Approximate KL of each update (and to the initial policy, where measured: `kl_ref`), the policy's
    entropy, and the fraction of clipped ratios: what a collapse or a runaway update shows first."""
    return _metric_panels(report, path, "KL, entropy and clip fraction",
                          [("KL", ["approx_kl", "kl_ref"]), ("entropy (nats/token)", ["entropy"]),
                           ("clip fraction", ["clipfrac"])])  # fmt: skip


def logprob_mismatch(report: RunReport, path: Path) -> Path | None:
    """|train logprob - engine logprob| per generated token, and the engine→train KL."""
    return _metric_panels(report, path, "Train/engine logprob mismatch",
                          [("mean |Δ logprob|", ["logprob_mismatch"]), ("KL(engine‖train)", ["kl_engine_train"])])  # fmt: skip


def sharing(report: RunReport, path: Path) -> Path | None:
    """Tree sharing (path tokens / unique tokens) and tokens trained per step."""
    return _metric_panels(report, path, "Prefix-tree sharing",
                          [("sharing ratio (×)", ["sharing_ratio"]), ("packed tokens per step", ["tokens"])])  # fmt: skip


PLOTS = {
    "reward_pass_rate.png": reward_and_pass_rate,
    "kl_entropy.png": kl_and_entropy,
    "logprob_mismatch.png": logprob_mismatch,
    "sharing.png": sharing,
}


def draw_all(report: RunReport, folder: Path) -> list[Path]:
    """Every plot with data, written into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    return [p for name, draw in PLOTS.items() if (p := draw(report, folder / name)) is not None]
