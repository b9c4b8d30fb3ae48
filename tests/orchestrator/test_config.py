"""The orchestrator config section: deployment overrides of the sandbox section, Kubernetes quantities."""

from __future__ import annotations

import pytest

from clawgym.config import load_config
from clawgym.errors import InvalidArgument
from clawgym.orchestrator.config import OrchestratorConfig, parse_cpu, parse_memory_mb
from clawgym.sandbox.config import SandboxConfig


def test_chart_style_environment_variables_load_into_the_section(monkeypatch):
    """The variables the Helm chart sets (JSON maps, a bool string) become typed fields."""
    monkeypatch.setenv("CLAWGYM_ORCHESTRATOR__SANDBOX_BACKEND", "kubernetes")
    monkeypatch.setenv(
        "CLAWGYM_ORCHESTRATOR__SANDBOX_IMAGES", '{"reference": "localhost/python-node:bookworm"}'
    )
    monkeypatch.setenv(
        "CLAWGYM_ORCHESTRATOR__SANDBOX_RESOURCES", '{"limits": {"cpu": "500m", "memory": "1Gi"}}'
    )
    monkeypatch.setenv("CLAWGYM_ORCHESTRATOR__SANDBOX_HOST_NETWORK", "true")
    monkeypatch.setenv("CLAWGYM_ORCHESTRATOR__HARNESS_CONCURRENCY", '{"claude-code": 4}')
    o = load_config().orchestrator
    assert o.sandbox_images == {"reference": "localhost/python-node:bookworm"}, o.sandbox_images
    assert o.harness_concurrency == {"claude-code": 4}, o.harness_concurrency
    r = o.resources()
    assert (r.cpus, r.memory_mb) == (0.5, 1024), f"limits become the sandbox's Resources: {r}"
    sandbox = o.sandbox_config(SandboxConfig())
    assert sandbox.backend == "kubernetes" and sandbox.kubernetes.host_network is True, (
        "the orchestrator's overrides win over the sandbox section"
    )


def test_overrides_left_empty_keep_the_sandbox_section_and_extra_read_only_paths_are_added():
    base = SandboxConfig(backend="local")
    base.kubernetes.namespace = "sbx"
    out = OrchestratorConfig().sandbox_config(base, ro_paths=["/opt/cache", base.local.ro_paths[0]])
    assert out.backend == "local" and out.kubernetes.namespace == "sbx", "empty overrides change nothing"
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
