"""The orchestrator's Prometheus metrics, on a registry of its own (one per orchestrator).

Names are the ones the Grafana dashboards query (deploy/grafana/dashboards: sandboxes and run
overview). The service exposes `registry` on its /metrics port; tests read it directly.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from clawgym.orchestrator.failures import KINDS

START_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class OrchestratorMetrics:
    """Active sandboxes, sandbox start latency, rollout duration and outcomes, failures by kind."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.active_sandboxes = Gauge(
            "clawgym_orchestrator_active_sandboxes",
            "Sandboxes alive now (created, not yet destroyed)",
            ["backend", "harness"],
            registry=r,
        )
        self.sandbox_start = Histogram(
            "clawgym_orchestrator_sandbox_start_seconds",
            "Sandbox create → ready to exec",
            ["backend"],
            buckets=START_BUCKETS,
            registry=r,
        )
        self.rollout_duration = Histogram(
            "clawgym_orchestrator_rollout_duration_seconds",
            "One rollout attempt from leaving the queue to its end (sandbox, harness, verifier)",
            ["harness"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.rollouts = Counter(
            "clawgym_orchestrator_rollouts",
            "Rollouts ended, by harness and final state (finished, failed, cancelled)",
            ["harness", "status"],
            registry=r,
        )
        self.failures = Counter(
            "clawgym_orchestrator_failures",
            "Infrastructure failures by kind (sandbox, harness_start, proxy, install, unsupported, internal, judge)",
            ["kind"],
            registry=r,
        )
        for kind in KINDS:  # each kind's series exists at 0: a run without failures charts 0, not "No data"
            self.failures.labels(kind=kind)
        self.waiting = Gauge(
            "clawgym_orchestrator_waiting_rollouts",
            "Registered rollouts waiting for a concurrency slot",
            registry=r,
        )
        self.judge_calls = Counter(
            "clawgym_orchestrator_judge_calls",
            "Hybrid tasks' rubric judgments by outcome (ok, failed)",
            ["outcome"],
            registry=r,
        )
        self.orphans_failed = Counter(
            "clawgym_orchestrator_orphaned_rollouts_failed",
            "Rollouts a lost orchestrator instance left registered or running, failed by this one",
            registry=r,
        )
        self.reaped = Counter(
            "clawgym_orchestrator_reaped_sandboxes",
            "Sandboxes of this owner left by an earlier process, deleted at start-up",
            registry=r,
        )
