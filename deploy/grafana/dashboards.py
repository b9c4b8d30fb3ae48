"""The Grafana dashboards of clawgym, as data: one list of panels per dashboard, written to JSON.

This owns what each dashboard shows (titles, units, PromQL); it does not own the metrics, which
each service registers itself. `tests/deploy/test_dashboards.py` checks that every metric queried
here is one a service exports, that the JSON under `deploy/grafana/dashboards/` is what this file
generates, and that every panel has a title and a unit.

    .venv/bin/python deploy/grafana/dashboards.py            # rewrite deploy/grafana/dashboards/*.json
    .venv/bin/python deploy/grafana/dashboards.py --check    # exit 1 when the JSON is stale
"""

import argparse
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

OUT_DIR = Path(__file__).resolve().parent / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}  # uid fixed by provisioning/datasources


@dataclass(frozen=True)
class Query:
    """One PromQL expression and how its series are named in the legend."""

    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    """A time series (or a single-value stat) panel; `unit` is a Grafana unit id."""

    title: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"
    description: str = ""
    min: float | None = None
    max: float | None = None


@dataclass(frozen=True)
class Dashboard:
    uid: str
    title: str
    description: str
    panels: tuple[Panel, ...] = field(default_factory=tuple)


def q(expr: str, legend: str = "") -> Query:
    return Query(expr, legend)


def quantiles(
    metric: str, by: str = "", window: str = "5m", qs: tuple[float, ...] = (0.5, 0.95, 0.99)
) -> tuple[Query, ...]:
    """histogram_quantile queries for a Prometheus histogram `metric` (its base name)."""
    labels = f"le{', ' + by if by else ''}"
    prefix = f"{{{{{by}}}}} " if by else ""
    return tuple(
        q(
            f"histogram_quantile({p}, sum by ({labels}) (rate({metric}_bucket[{window}])))",
            f"{prefix}p{round(p * 100)}",
        )
        for p in qs
    )


# --- the dashboards -------------------------------------------------------------------------------

RUN = Dashboard(
    uid="clawgym-run",
    title="clawgym / run overview",
    description="Is the policy learning: reward and pass rate per harness, throughput, steps, versions, lag.",
    panels=(
        Panel(
            "Reward per harness",
            "short",
            (q("avg by (harness) (clawgym_trainer_reward)", "{{harness}}"),),
            description="Mean verifier reward of the rollouts consumed in the latest step.",
            min=0,
            max=1,
        ),
        Panel(
            "Pass rate per harness",
            "percentunit",
            (q("avg by (harness) (clawgym_trainer_pass_rate)", "{{harness}}"),),
            min=0,
            max=1,
        ),
        Panel(
            "Rollouts per minute",
            "opm",
            (
                q(
                    "sum by (harness, status) (rate(clawgym_orchestrator_rollouts_total[5m])) * 60",
                    "{{harness}} {{status}}",
                ),
            ),
        ),
        Panel("Training step", "short", (q("max(clawgym_trainer_step)", "step"),), kind="stat"),
        Panel(
            "Checkpoint version: published vs served",
            "short",
            (
                q("max(clawgym_trainer_checkpoint_version)", "published (trainer)"),
                q("min(clawgym_inference_policy_version)", "served (oldest replica)"),
            ),
        ),
        Panel(
            "Policy lag of consumed rollouts",
            "short",
            (
                *quantiles("clawgym_trainer_policy_lag", qs=(0.5, 0.95)),
                q("sum(rate(clawgym_trainer_stale_rollouts_total[5m])) * 60", "dropped as stale / min"),
            ),
            description="Versions between the policy that generated a rollout and the one it trains.",
        ),
    ),
)

PROXY = Dashboard(
    uid="clawgym-proxy",
    title="clawgym / proxy",
    description="The capturing proxy between the harnesses and the engine.",
    panels=(
        Panel(
            "Requests by protocol and harness",
            "reqps",
            (
                q(
                    "sum by (protocol, harness) (rate(clawgym_proxy_requests_total[1m]))",
                    "{{protocol}} {{harness}}",
                ),
            ),
        ),
        Panel("Request latency", "s", quantiles("clawgym_proxy_latency_seconds")),
        Panel("Time to first token", "s", quantiles("clawgym_proxy_ttft_seconds")),
        Panel(
            "Proxy overhead (time not spent in the engine)",
            "s",
            quantiles("clawgym_proxy_overhead_seconds", qs=(0.5, 0.99)),
        ),
        Panel(
            "Tokens in and out",
            "suffix:tok/s",
            (
                q("sum by (protocol) (rate(clawgym_proxy_prompt_tokens_total[1m]))", "prompt {{protocol}}"),
                q("sum by (protocol) (rate(clawgym_proxy_output_tokens_total[1m]))", "output {{protocol}}"),
                q(
                    "sum by (protocol) (rate(clawgym_proxy_rendered_tokens_total[1m]))",
                    "prompt tokenized from text (not spliced) {{protocol}}",
                ),
            ),
        ),
        Panel(
            "Prefix-extension rate",
            "percentunit",
            (
                q(
                    "sum by (harness) (rate(clawgym_proxy_prefix_extended_calls_total[5m]))"
                    " / sum by (harness) (rate(clawgym_proxy_calls_total[5m]))",
                    "{{harness}}",
                ),
            ),
            description="Share of calls whose prompt extends the rollout's previous prompt + output exactly.",
            min=0,
            max=1,
        ),
        Panel(
            "Sampling temperature by harness",
            "short",
            (
                q(
                    "sum by (harness) (rate(clawgym_proxy_sampling_temperature_sum[5m]))"
                    " / sum by (harness) (rate(clawgym_proxy_sampling_temperature_count[5m]))",
                    "{{harness}} mean",
                ),
            ),
            description="Each call is recorded with its temperature and trained under it; mixed harnesses may differ.",
            min=0,
        ),
        Panel(
            "Errors by status code",
            "reqps",
            (
                q(
                    # `or … * 0`: a flat 0 while requests flow without errors, instead of "No data"
                    'sum by (status, protocol) (rate(clawgym_proxy_requests_total{status!~"2.."}[5m]))'
                    " or sum(rate(clawgym_proxy_requests_total[5m])) * 0",
                    "{{status}} {{protocol}}",
                ),
            ),
        ),
        Panel(
            "Store: calls recorded and RPC errors",
            "reqps",
            (
                q("sum(rate(clawgym_store_calls_recorded_total[1m]))", "calls recorded"),
                q(
                    'sum by (method, code) (rate(clawgym_store_requests_total{code!="OK"}[5m]))'
                    " or sum(rate(clawgym_store_requests_total[5m])) * 0",
                    "{{method}} {{code}}",
                ),
            ),
            description="Every call is durable in the store before the harness gets its answer's last byte.",
        ),
        Panel(
            "Store: RecordCall latency",
            "s",
            tuple(
                q(
                    f'histogram_quantile({p}, sum by (le) (rate(clawgym_store_request_seconds_bucket{{method="RecordCall"}}[5m])))',
                    f"p{round(p * 100)}",
                )
                for p in (0.5, 0.99)
            ),
        ),
    ),
)

INFERENCE = Dashboard(
    uid="clawgym-inference",
    title="clawgym / inference",
    description="The engine replicas: throughput, batching, queue and checkpoint reloads.",
    panels=(
        Panel(
            "Generated tokens per second",
            "suffix:tok/s",
            (q("sum by (instance) (rate(clawgym_inference_generated_tokens_total[1m]))", "{{instance}}"),),
        ),
        Panel(
            "Batch size", "short", (q("avg by (instance) (clawgym_inference_batch_size)", "{{instance}}"),)
        ),
        Panel(
            "Decode rows reading a shared prefix",
            "percentunit",
            (q("avg by (instance) (clawgym_inference_shared_prefix_rows)", "{{instance}}"),),
        ),
        Panel(
            "Requests running and waiting",
            "short",
            (
                q("sum(clawgym_inference_running_requests)", "running"),
                q("sum(clawgym_inference_waiting_requests)", "waiting"),
            ),
        ),
        Panel(
            "Checkpoint reload time",
            "s",
            quantiles("clawgym_inference_reload_seconds", qs=(0.5, 1.0), window="1h"),
        ),
        Panel(
            "Policy version served",
            "short",
            (q("max by (instance) (clawgym_inference_policy_version)", "{{instance}}"),),
        ),
    ),
)

TRAINING = Dashboard(
    uid="clawgym-training",
    title="clawgym / training",
    description="The optimizer's diagnostics per step (CleanRL's names, plus clawgym's).",
    panels=(
        Panel("Loss", "short", (q("clawgym_trainer_loss", "loss"),)),
        Panel("KL to the sampling policy", "short", (q("clawgym_trainer_approx_kl", "approx KL"),)),
        Panel("Entropy", "short", (q("clawgym_trainer_entropy", "entropy"),)),
        Panel("Clip fraction", "percentunit", (q("clawgym_trainer_clipfrac", "clipped"),), min=0, max=1),
        Panel("Gradient norm", "short", (q("clawgym_trainer_grad_norm", "grad norm (before clipping)"),)),
        Panel(
            "Train / engine logprob mismatch",
            "short",
            (q("clawgym_trainer_logprob_mismatch", "mean |Δ logprob|"),),
            description="Mean absolute difference between the trainer's and the engine's logprob of each generated token.",
        ),
        Panel(
            "Tree sharing ratio",
            "suffix:×",
            (q("clawgym_trainer_sharing_ratio", "path tokens / tree tokens"),),
            description="Tokens of all root-to-leaf paths divided by the tokens the packed trees compute.",
        ),
        Panel(
            "Training tokens per second",
            "suffix:tok/s",
            (q("clawgym_trainer_tokens_per_s", "tokens/s"),),
        ),
        Panel("Step time", "s", (q("clawgym_trainer_step_s", "step"),)),
    ),
)

SANDBOXES = Dashboard(
    uid="clawgym-sandboxes",
    title="clawgym / sandboxes",
    description="Where rollouts run: local processes or Kubernetes pods.",
    panels=(
        Panel(
            "Active sandboxes",
            "short",
            (
                q(
                    "sum by (backend, harness) (clawgym_orchestrator_active_sandboxes)",
                    "{{backend}} {{harness}}",
                ),
            ),
        ),
        Panel(
            "Rollouts waiting for a slot",
            "short",
            (q("sum(clawgym_orchestrator_waiting_rollouts)", "waiting"),),
            description="Registered rollouts held back by the global or per-harness concurrency limits.",
        ),
        Panel(
            "Sandbox start latency",
            "s",
            quantiles("clawgym_orchestrator_sandbox_start_seconds", by="backend", qs=(0.5, 0.95)),
        ),
        Panel(
            "Failures by kind",
            "opm",
            (q("sum by (kind) (rate(clawgym_orchestrator_failures_total[5m])) * 60", "{{kind}}"),),
            description="Infrastructure failures (retried, never rewarded) by kind.",
        ),
        Panel(
            "Rollout duration",
            "s",
            quantiles("clawgym_orchestrator_rollout_duration_seconds", by="harness", qs=(0.5, 0.95)),
        ),
    ),
)

DASHBOARDS = (RUN, PROXY, INFERENCE, TRAINING, SANDBOXES)


# --- rendering to Grafana JSON --------------------------------------------------------------------


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict:
    """One Grafana panel (schema of Grafana 10/11) at grid position (x, y)."""
    defaults: dict = {"unit": panel.unit}
    if panel.min is not None:
        defaults["min"] = panel.min
    if panel.max is not None:
        defaults["max"] = panel.max
    if panel.kind == "timeseries":
        defaults["custom"] = {"drawStyle": "line", "lineWidth": 1, "fillOpacity": 10, "showPoints": "never"}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": 12, "h": 8},
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
        if panel.kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": t.expr, "legendFormat": t.legend}
            for i, t in enumerate(panel.queries)
        ],
    }


def dashboard_json(d: Dashboard) -> dict:
    """A whole dashboard; panels flow left to right, two per row."""
    panels = [panel_json(p, i + 1, 12 * (i % 2), 8 * (i // 2)) for i, p in enumerate(d.panels)]
    return {
        "uid": d.uid,
        "title": d.title,
        "description": d.description,
        "tags": ["clawgym"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": []},
        "annotations": {"list": []},
        "panels": panels,
    }


def render_all() -> dict[str, str]:
    """File name → JSON text of every dashboard."""
    return {
        f"{d.uid}.json": json.dumps(dashboard_json(d), indent=2, ensure_ascii=False) + "\n"
        for d in DASHBOARDS
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the JSON files differ from this file")
    args = parser.parse_args(argv)
    files = render_all()
    stale = [
        n for n, text in files.items() if not (OUT_DIR / n).is_file() or (OUT_DIR / n).read_text() != text
    ]
    if args.check:
        for n in stale:
            print(f"stale: deploy/grafana/dashboards/{n} (run deploy/grafana/dashboards.py)", file=sys.stderr)
        return 1 if stale else 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for n, text in files.items():
        (OUT_DIR / n).write_text(text)
    print(f"wrote {len(files)} dashboards to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
