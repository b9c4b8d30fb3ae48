"""What a sandbox pod looks like: its manifest, labels and warm-pool key. Pure functions, no API calls.

One pod per sandbox, one container that only sleeps (commands arrive through exec), one emptyDir
holding every writable directory as a subPath (workspace, HOME, /tmp, each task mount), the same
layout the local backend uses. Hardening: no service-account token, no service links,
no privilege escalation, capabilities dropped (NET_RAW included: with hostNetwork it would let
a task sniff the node), terminationGracePeriodSeconds 0 and `activeDeadlineSeconds`, so a pod
its orchestrator forgot ends by itself.

A spec's `build` (a task's own image) becomes its image by `with_task_image` first, the one
function here that reads files (the build context, hashed for the image's tag).

`Resources` here: cpus and memory_mb are the container's limits (requests are a fraction of
them, `request_fraction`), disk_mb is the emptyDir's sizeLimit; processes and open_files are
the node's business (kubelet podPidsLimit, runtime defaults) and cpu_time_s is not enforced.
"""

import dataclasses
import hashlib
import json
import math
from typing import Any

from clawgym.sandbox.config import KubernetesSandboxConfig
from clawgym.sandbox.docker_images import image_name
from clawgym.sandbox.interface import (
    EGRESS_LABEL,
    HARNESS_LABEL,
    INSTANCE_LABEL,
    MANAGED_BY,
    OWNER_LABEL,
    SANDBOX_LABEL,
    SandboxSpec,
    storage_layout,
)

COMPONENT = "app.kubernetes.io/component"
PART_OF = "app.kubernetes.io/part-of"
POOL_LABEL = "clawgym.dev/pool"
CONTAINER = "sandbox"
VOLUME = "sandbox"
# Slack past the sandbox's own lifetime before the kubelet kills a pod nobody deleted.
DEADLINE_SLACK_S = 60
# A warm pod nobody claimed ends after this; a claim can only shorten it (the API forbids raising it).
WARM_POD_MAX_S = 6 * 3600


def uses_host_network(spec: SandboxSpec, cfg: KubernetesSandboxConfig) -> bool:
    # a sandbox without network must not share the node's; on the pod network the
    # deny-all NetworkPolicy (deploy/k8s) selects it by its egress label
    return cfg.host_network and spec.network != "none"


def with_task_image(spec: SandboxSpec, cfg: KubernetesSandboxConfig) -> SandboxSpec:
    """`spec` running its task's built image (`spec.build`), named as the docker backend names it,
    under `cfg.task_image_registry`. Reads the build context (its content is the image's tag)."""
    if spec.build is None:
        return spec
    name = image_name(spec.build, cfg.image_repository)
    registry = cfg.task_image_registry.rstrip("/")
    return dataclasses.replace(spec, image=f"{registry}/{name}" if registry else name, build=None)


def pool_key(spec: SandboxSpec, cfg: KubernetesSandboxConfig) -> str:
    """Pods are interchangeable iff this matches: everything fixed at pod creation."""
    shape = {
        "image": spec.image or cfg.image,
        "layout": storage_layout(spec),
        "resources": spec.resources.__dict__,
        "network": spec.network,
        "host_network": uses_host_network(spec, cfg),
    }
    return hashlib.sha256(json.dumps(shape, sort_keys=True).encode()).hexdigest()[:16]


def base_labels(owner: str, spec: SandboxSpec, instance: str = "") -> dict[str, str]:
    """The labels every sandbox pod carries (garbage collection and NetworkPolicy select on them)."""
    labels = {
        MANAGED_BY: "clawgym",
        PART_OF: "clawgym",  # with COMPONENT: what the chart's sandbox NetworkPolicy selects
        COMPONENT: "sandbox",
        OWNER_LABEL: owner,
        EGRESS_LABEL: spec.network,
    }
    if instance:
        labels[INSTANCE_LABEL] = instance
    return labels


def claim_labels(sandbox_id: str, spec: SandboxSpec) -> dict[str, str]:
    """Labels that make a pod one rollout's sandbox (set at creation, or when a warm pod is claimed)."""
    labels = {**spec.labels, SANDBOX_LABEL: sandbox_id}
    if spec.harness:
        labels[HARNESS_LABEL] = spec.harness
    return labels


def _quantity_cpu(cpus: float) -> str:
    return f"{max(1, math.ceil(cpus * 1000))}m"


def pod_manifest(
    *,
    name: str,
    spec: SandboxSpec,
    cfg: KubernetesSandboxConfig,
    labels: dict[str, str],
    deadline_s: int | None,
) -> dict[str, Any]:
    """The Pod object. `deadline_s`: activeDeadlineSeconds (warm pods: WARM_POD_MAX_S, cut when claimed)."""
    r = spec.resources
    limits = {"cpu": _quantity_cpu(r.cpus), "memory": f"{r.memory_mb}Mi"}
    requests = {
        "cpu": _quantity_cpu(r.cpus * cfg.request_fraction),
        "memory": f"{max(1, math.ceil(r.memory_mb * cfg.request_fraction))}Mi",
    }
    host_network = uses_host_network(spec, cfg)
    container = {
        "name": CONTAINER,
        "image": spec.image or cfg.image,
        "imagePullPolicy": cfg.image_pull_policy,
        # the container only keeps the pod alive; every command arrives through exec
        "command": ["sleep", "2147483647"],
        "workingDir": spec.workdir,
        "env": [{"name": "HOME", "value": spec.home}, {"name": "TMPDIR", "value": "/tmp"}],
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": [
            {"name": VOLUME, "mountPath": path, "subPath": sub} for sub, path in storage_layout(spec)
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": list(cfg.drop_capabilities), "add": list(cfg.add_capabilities)},
        },
    }
    pod_spec: dict[str, Any] = {
        "containers": [container],
        "volumes": [{"name": VOLUME, "emptyDir": {"sizeLimit": f"{r.disk_mb}Mi"} if r.disk_mb else {}}],
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "hostNetwork": host_network,
        "dnsPolicy": "ClusterFirstWithHostNet" if host_network else "ClusterFirst",
    }
    if deadline_s is not None:
        pod_spec["activeDeadlineSeconds"] = deadline_s
    if cfg.node_selector:
        pod_spec["nodeSelector"] = dict(cfg.node_selector)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": pod_spec,
    }


def lifetime_deadline(spec: SandboxSpec, already_running_s: float = 0.0) -> int:
    """activeDeadlineSeconds for a sandbox (counted by the kubelet from the pod's start)."""
    return math.ceil(already_running_s + spec.timeout_s) + DEADLINE_SLACK_S


# Container states that will not become Running without someone fixing the pod or the image.
FATAL_WAITING = {
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "CrashLoopBackOff",
    "RunContainerError",
}
