"""The Grafana dashboards: generated from deploy/grafana/dashboards.py, complete, and about real metrics.

Every metric a panel queries must be one a service exports. The exported names are collected two
ways: by instantiating each service's metrics class (a `registry` attribute holding a
prometheus_client CollectorRegistry, as `clawgym_services.inference.metrics.InferenceMetrics`), and by
reading the metric constructors (`Counter("clawgym_…")`, …) in the services' and library's source.
A service that registers no metrics yet is reported (skipped with the missing names), not faked.
"""

import ast
import importlib
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

REPO = Path(__file__).resolve().parents[2]
BOARDS = sorted((REPO / "deploy" / "grafana" / "dashboards").glob("*.json"))
SERVICES = ("store", "inference", "proxy", "orchestrator", "trainer")
# sample-name suffixes each metric type exposes (prometheus_client text format)
SUFFIXES = {
    "Counter": ("_total", "_created"),
    "Gauge": ("",),
    "Histogram": ("_bucket", "_sum", "_count", "_created"),
    "Summary": ("", "_sum", "_count", "_created"),
    "Info": ("_info",),
    "Enum": ("",),
}
REGISTRY_TYPES = {"counter": "Counter", "gauge": "Gauge", "histogram": "Histogram", "summary": "Summary",
                  "info": "Info", "stateset": "Enum"}  # fmt: skip
GRAFANA_UNITS = re.compile(
    r"^(short|none|percent|percentunit|s|ms|µs|ns|reqps|ops|opm|rps|bytes|decbytes)$|^suffix:.+"
)


def _panels() -> list[tuple[str, dict]]:
    return [(b.name, p) for b in BOARDS for p in json.loads(b.read_text())["panels"]]


def _queried_metrics() -> set[str]:
    names = set()
    for _, panel in _panels():
        for target in panel["targets"]:
            names |= set(re.findall(r"\bclawgym_[a-z0-9_]+", target["expr"]))
    return names


def _source_metrics() -> dict[str, str]:
    """name → type of every prometheus_client metric constructed with a literal name in the source."""
    found: dict[str, str] = {}
    for path in [*(REPO / "services").rglob("*.py"), *(REPO / "libs" / "clawgym").rglob("*.py")]:
        if "generated" in path.relative_to(REPO).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if func in SUFFIXES and str(node.args[0].value).startswith("clawgym_"):
                found[node.args[0].value] = func
    return found


def _registry_metrics() -> dict[str, str]:
    """name → type from every no-argument metrics class in clawgym_services.<svc>.metrics and in the
    service's core, clawgym.<svc>.metrics (names built from a table, e.g. the trainer's step gauges)."""
    found: dict[str, str] = {}
    for name in [f"{pkg}.{svc}.metrics" for svc in SERVICES for pkg in ("clawgym_services", "clawgym")]:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError:
            continue
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__:
                continue
            try:
                registry = getattr(cls(), "registry", None)
            except TypeError:
                continue  # needs arguments: the source scan covers it
            if isinstance(registry, CollectorRegistry):
                for family in registry.collect():
                    found[family.name] = REGISTRY_TYPES.get(family.type, "Gauge")
    return found


def _exported_samples() -> dict[str, set[str]]:
    """service → every sample name its metrics expose (e.g. clawgym_proxy_requests_total)."""
    metrics = {**_source_metrics(), **_registry_metrics()}
    samples: dict[str, set[str]] = {svc: set() for svc in SERVICES}
    for name, kind in metrics.items():
        base = name.removesuffix("_total") if kind == "Counter" else name
        svc = base.split("_")[1]
        samples.setdefault(svc, set()).update(base + s for s in SUFFIXES[kind])
    return samples


def test_the_dashboard_json_is_what_dashboards_py_generates():
    """deploy/grafana/dashboards/*.json are generated; editing them by hand is lost on the next run."""
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "grafana" / "dashboards.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"stale dashboards, run deploy/grafana/dashboards.py:\n{done.stderr}"


def test_there_are_the_five_dashboards():
    """Run overview, proxy, inference, training, sandboxes."""
    uids = {json.loads(b.read_text())["uid"] for b in BOARDS}
    assert uids == {
        "clawgym-run",
        "clawgym-proxy",
        "clawgym-inference",
        "clawgym-training",
        "clawgym-sandboxes",
    }, uids


@pytest.mark.parametrize("board,panel", _panels(), ids=[f"{b}:{p['title']}" for b, p in _panels()])
def test_every_panel_has_a_title_a_unit_and_a_query(board: str, panel: dict):
    assert panel["title"].strip(), f"{board}: panel {panel['id']} has no title"
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    assert GRAFANA_UNITS.match(unit), (
        f"{board}: panel {panel['title']!r} has unit {unit!r}, not a Grafana unit"
    )
    assert panel["targets"] and all(t["expr"].strip() for t in panel["targets"]), (
        f"{panel['title']!r} queries nothing"
    )
    assert all(t["datasource"]["uid"] == "prometheus" for t in panel["targets"]), (
        "queries must name the provisioned uid"
    )


def test_the_metric_collection_sees_the_inference_services_metrics():
    """Guards the collector itself: the inference service's registry is read (it exists and has metrics)."""
    samples = _exported_samples()["inference"]
    assert "clawgym_inference_generated_tokens_total" in samples, (
        f"collector missed inference metrics: {samples}"
    )


def test_dashboards_query_only_metrics_the_services_export():
    """Every metric a panel queries is a sample some service's registry exposes (none is invented)."""
    exported = _exported_samples()
    wrong = {}
    for name in sorted(_queried_metrics()):
        svc = name.split("_")[1]
        if name not in exported.get(svc, set()):
            wrong.setdefault(svc, []).append(name)
    assert not wrong, f"dashboards query metrics no service exports (service → names): {wrong}"
