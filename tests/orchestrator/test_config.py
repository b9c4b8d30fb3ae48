"""The orchestrator config section: what the Helm chart sets through it, Kubernetes quantities."""

from __future__ import annotations

import pytest

from clawgym.config import load_config
from clawgym.errors import InvalidArgument
from clawgym.orchestrator.config import parse_cpu, parse_memory_mb
from clawgym.sandbox.config import SandboxConfig


def test_chart_style_environment_variables_load_into_the_section(monkeypatch):
    """The variables the Helm chart sets (JSON maps, a bool string) become typed fields."""
    monkeypatch.setenv("CLAWGYM_SANDBOX__BACKEND", "kubernetes")
    monkeypatch.setenv(
        "CLAWGYM_ORCHESTRATOR__SANDBOX_IMAGES", '{"reference": "localhost/python-node:bookworm"}'
    )
    monkeypatch.setenv(
        "CLAWGYM_ORCHESTRATOR__SANDBOX_RESOURCES", '{"limits": {"cpu": "500m", "memory": "1Gi"}}'
    )
    monkeypatch.setenv("CLAWGYM_SANDBOX__KUBERNETES__HOST_NETWORK", "true")
    monkeypatch.setenv("CLAWGYM_ORCHESTRATOR__HARNESS_CONCURRENCY", '{"claude-code": 4}')
    cfg = load_config()
    o = cfg.orchestrator
    assert o.sandbox_images == {"reference": "localhost/python-node:bookworm"}, o.sandbox_images
    assert o.harness_concurrency == {"claude-code": 4}, o.harness_concurrency
    r = o.resources()
    assert (r.cpus, r.memory_mb) == (0.5, 1024), f"limits become the sandbox's Resources: {r}"
    assert cfg.sandbox.backend == "kubernetes" and cfg.sandbox.kubernetes.host_network is True, (
        "the chart's sandbox variables reach the sandbox section"
    )


@pytest.mark.parametrize("key", ["sandbox_backend", "namespace", "sandbox_host_network"])
def test_the_sandbox_backend_is_named_in_the_sandbox_section_only(monkeypatch, key):
    """The orchestrator section no longer restates the sandbox backend, its namespace or hostNetwork: a
    deployment still setting them fails at start naming the key, not with another backend than it asked."""
    monkeypatch.setenv(f"CLAWGYM_ORCHESTRATOR__{key.upper()}", "kubernetes")
    with pytest.raises(InvalidArgument, match=f"unknown config key orchestrator.{key}"):
        load_config()


def test_extra_read_only_paths_are_added_once_and_the_section_is_kept():
    base = SandboxConfig(backend="local")
    base.kubernetes.namespace = "sbx"
    out = base.with_ro_paths(["/opt/cache", base.local.ro_paths[0]])
    assert out.backend == "local" and out.kubernetes.namespace == "sbx", "only the read-only paths change"
    assert out.local.ro_paths == [*base.local.ro_paths, "/opt/cache"], (
        f"the harness/provision caches are added once: {out.local.ro_paths}"
    )
    assert base.local.ro_paths != out.local.ro_paths, "the given section is not modified"


@pytest.mark.parametrize(("text", "cores"), [("2", 2.0), ("500m", 0.5), (1.5, 1.5), ("0.25", 0.25)])
def test_cpu_quantities_are_read_like_kubernetes_does(text, cores):
    assert parse_cpu(text) == cores, f"{text!r} is {cores} cores"


@pytest.mark.parametrize(
    ("text", "mb"), [("4Gi", 4096), ("512Mi", 512), ("1G", 953), (2**30, 1024), ("1536Ki", 1)]
)
def test_memory_quantities_are_read_like_kubernetes_does(text, mb):
    assert parse_memory_mb(text) == mb, f"{text!r} is {mb} MiB"


@pytest.mark.parametrize("bad", ["two", "1.5x", "-1", "0m", ""])
def test_bad_cpu_quantities_are_invalid_arguments(bad):
    with pytest.raises(InvalidArgument):
        parse_cpu(bad)


@pytest.mark.parametrize("bad", ["lots", "4GB", "-1Gi", "0", "1Zi"])
def test_bad_memory_quantities_are_invalid_arguments(bad):
    with pytest.raises(InvalidArgument):
        parse_memory_mb(bad)


def test_an_unknown_key_in_the_section_fails_at_load_naming_it():
    with pytest.raises(InvalidArgument, match=r"orchestrator\.max_concurent_rollouts"):
        load_config(orchestrator={"max_concurent_rollouts": 3})
