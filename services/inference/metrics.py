"""The inference service's Prometheus metrics, on a registry of their own (one per server).

Owns the metric names (the Grafana dashboard in deploy/grafana reads them) and refreshing the
gauges from the engine's status; not the HTTP endpoint's lifetime (the server owns it).
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from clawgym.inference.interface import EngineStatus


class InferenceMetrics:
    """tokens/s (`rate()` of the token counter), running/waiting requests, batch size, version, reloads."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.generated_tokens = Counter(
            "clawgym_inference_generated_tokens", "Tokens generated (rate() = tokens/s)", registry=r
        )
        self.requests = Counter(
            "clawgym_inference_requests",
            "Generate requests ended, by finish reason",
            ["finish_reason"],
            registry=r,
        )
        self.running = Gauge("clawgym_inference_running_requests", "Requests in the decode batch", registry=r)
        self.waiting = Gauge("clawgym_inference_waiting_requests", "Requests queued for a slot", registry=r)
        self.batch_size = Gauge(
            "clawgym_inference_batch_size", "Mean decode batch size since the previous refresh", registry=r
        )
        self.shared_fraction = Gauge(
            "clawgym_inference_shared_prefix_rows",
            "Fraction of decode rows since the previous refresh that read a shared prefix's one copy",
            registry=r,
        )
        self.policy_version = Gauge(
            "clawgym_inference_policy_version", "Version of the weights served", registry=r
        )
        self.ready = Gauge(
            "clawgym_inference_ready", "1 when the engine serves and is not reloading", registry=r
        )
        self.reload_seconds = Histogram(
            "clawgym_inference_reload_seconds",
            "Seconds from a LoadWeights request to the swap",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        self._steps = self._rows = self._shared = 0.0

    def refresh(self, status: EngineStatus) -> None:
        """Sets the gauges from one engine status (engines that count decode steps give a mean batch)."""
        self.running.set(status.running)
        self.waiting.set(status.waiting)
        self.policy_version.set(status.policy_version)
        self.ready.set(1.0 if status.ready else 0.0)
        steps, rows = status.extra.get("decode_steps"), status.extra.get("decode_rows")
        if steps is None or rows is None:
            self.batch_size.set(status.running)
        elif steps > self._steps:
            shared = status.extra.get("shared_rows", 0.0)
            self.batch_size.set((rows - self._rows) / (steps - self._steps))
            self.shared_fraction.set((shared - self._shared) / max(1.0, rows - self._rows))
            self._steps, self._rows, self._shared = steps, rows, shared
        else:
            self.batch_size.set(0)
            self.shared_fraction.set(0)
