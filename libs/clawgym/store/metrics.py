"""The store service's Prometheus metrics, on a registry of their own (one per server).

Names are the ones the Grafana "services" panels query (deploy/grafana/dashboards.py). The
service exposes `registry` on its /metrics port; tests read it directly.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class StoreMetrics:
    """Requests by method and status code, their latency, and the calls and tokens recorded."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "clawgym_store_requests", "Store RPCs answered, by method and gRPC status code", ["method", "code"],
            registry=r,
        )  # fmt: skip
        self.latency = Histogram(
            "clawgym_store_request_seconds", "Store RPC handling time (streams: until they end)", ["method"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.calls = Counter("clawgym_store_calls_recorded", "Model calls recorded", registry=r)
        self.tokens = Counter(
            "clawgym_store_tokens_recorded", "Prompt + output tokens of the calls recorded", registry=r
        )

    def observe(self, method: str, code: str, seconds: float) -> None:
        """One RPC answered with status `code` after `seconds`."""
        self.requests.labels(method, code).inc()
        self.latency.labels(method).observe(seconds)
