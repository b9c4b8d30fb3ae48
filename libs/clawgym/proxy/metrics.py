"""The proxy's Prometheus metrics, in a registry of its own (one per app, so tests build fresh ones).

Owns metric names and labels: every series is labelled by protocol and harness. Overhead is
the call's wall time not spent waiting for the engine (rendering, tokenization, parsing,
resolution, recording); the prefix-extension counter says how often a prompt extended an earlier
call's prompt + output exactly (ARCHITECTURE.md §5), i.e. how often splicing worked.
"""

from prometheus_client import CollectorRegistry, Counter, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
OVERHEAD_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)
TEMPERATURE_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.2, 1.5, 2.0)
LABELS = ("protocol", "harness")


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "clawgym_proxy_requests", "model calls answered, by HTTP status", (*LABELS, "status"), registry=r
        )
        self.latency = Histogram(
            "clawgym_proxy_latency_seconds",
            "request to last byte",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "clawgym_proxy_ttft_seconds",
            "request to first generated token",
            LABELS,
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.overhead = Histogram(
            "clawgym_proxy_overhead_seconds",
            "call time not spent waiting for the engine",
            LABELS,
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.tokens_in = Counter(
            "clawgym_proxy_prompt_tokens", "prompt tokens sent to the engine", LABELS, registry=r
        )
        self.tokens_rendered = Counter(
            "clawgym_proxy_rendered_tokens",
            "prompt tokens tokenized from text (not spliced)",
            LABELS,
            registry=r,
        )
        self.tokens_out = Counter("clawgym_proxy_output_tokens", "tokens generated", LABELS, registry=r)
        self.calls = Counter("clawgym_proxy_calls", "calls recorded", (*LABELS, "finish_reason"), registry=r)
        self.temperature = Histogram(
            "clawgym_proxy_sampling_temperature",
            "temperature each recorded call was sampled at (the harness's own, or the forced one)",
            LABELS,
            buckets=TEMPERATURE_BUCKETS,
            registry=r,
        )
        self.stage = Histogram(
            "clawgym_proxy_stage_seconds",
            "wall seconds of one step of a call (`build_*`: inside the rendering thread)",
            ("stage",),
            buckets=OVERHEAD_BUCKETS,
            registry=r,
        )
        self.prefix_extended = Counter(
            "clawgym_proxy_prefix_extended_calls",
            "calls whose prompt extends an earlier call's prompt + output exactly",
            LABELS,
            registry=r,
        )
