"""The sandbox pod manifest: labels for GC and policy, hardening, layout. Pure; no cluster needed."""

from datetime import UTC, datetime, timedelta

from kubernetes import client

from clawgym.sandbox import KubernetesSandboxConfig, Resources, SandboxSpec
from clawgym.sandbox.k8s_leases import lease_liveness
from clawgym.sandbox.k8s_pods import base_labels, claim_labels, lifetime_deadline, pod_manifest, pool_key
from clawgym.sandbox.kubernetes import out_of_memory

CFG = KubernetesSandboxConfig(
    image="localhost/python-node:bookworm", image_pull_policy="Never", host_network=True
)
SPEC = SandboxSpec(
    workdir="/app",
    mounts=["/tests", "/root/.openclaw/workspace"],
    resources=Resources(cpus=2, memory_mb=1024, disk_mb=500),
    labels={"clawgym.dev/rollout": "r-1"},
    harness="reference",
    timeout_s=600,
)


def _pod(spec: SandboxSpec = SPEC, cfg: KubernetesSandboxConfig = CFG) -> dict:
    labels = {**base_labels("orch-0", spec), **claim_labels("clawgym-sbx-abc", spec)}
    return pod_manifest(
        name="clawgym-sbx-abc", spec=spec, cfg=cfg, labels=labels, deadline_s=lifetime_deadline(spec)
    )


def test_a_sandbox_pod_carries_the_labels_gc_and_network_policy_select_on():
    labels = _pod()["metadata"]["labels"]
    expected = {
        "app.kubernetes.io/managed-by": "clawgym",
        "app.kubernetes.io/part-of": "clawgym",
        "app.kubernetes.io/component": "sandbox",
        "clawgym.dev/owner": "orch-0",
        "clawgym.dev/egress": "proxy",
        "clawgym.dev/sandbox": "clawgym-sbx-abc",
        "clawgym.dev/harness": "reference",
        "clawgym.dev/rollout": "r-1",
    }
    assert labels == expected, f"labels drive reap() and the NetworkPolicies: {labels}"


def test_a_sandbox_pod_is_hardened_and_ends_by_itself():
    pod = _pod()
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["automountServiceAccountToken"] is False, "a task must not get an API token"
    assert spec["enableServiceLinks"] is False and spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 0, "deletes must be immediate"
    assert spec["activeDeadlineSeconds"] == 600 + 60, "the kubelet ends a forgotten pod after its lifetime"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    caps = container["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"] and "NET_RAW" not in caps["add"], f"NET_RAW must stay dropped: {caps}"
    assert container["resources"]["limits"] == {"cpu": "2000m", "memory": "1024Mi"}
    assert container["resources"]["requests"] == {"cpu": "500m", "memory": "256Mi"}, (
        "requests = limits x 0.25"
    )
    assert spec["volumes"] == [{"name": "sandbox", "emptyDir": {"sizeLimit": "500Mi"}}]


def test_every_writable_path_is_its_own_subpath_of_one_volume_parents_first():
    mounts = [(m["mountPath"], m["subPath"]) for m in _pod()["spec"]["containers"][0]["volumeMounts"]]
    paths = [p for p, _ in mounts]
    assert set(paths) == {"/app", "/tests", "/root", "/tmp", "/root/.openclaw/workspace"}, paths
    assert paths.index("/root") < paths.index("/root/.openclaw/workspace"), (
        "HOME must be mounted before a mount in it"
    )
    assert len({sub for _, sub in mounts}) == len(mounts), "no two paths may share a directory"


def test_host_network_is_used_only_for_sandboxes_that_may_reach_the_proxy():
    online = _pod()["spec"]
    offline = _pod(SandboxSpec(network="none"))["spec"]
    assert online["hostNetwork"] is True and online["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert offline["hostNetwork"] is False, "network=none must never share the node's network"
    assert _pod(SandboxSpec(network="none"))["metadata"]["labels"]["clawgym.dev/egress"] == "none"


def test_pods_of_one_shape_share_a_pool_key_whatever_their_env_and_labels():
    same = SandboxSpec(workdir="/app", env={"A": "1"}, labels={"x": "y"}, harness="nop")
    assert pool_key(SandboxSpec(workdir="/app"), CFG) == pool_key(same, CFG), "env/labels do not shape a pod"
    assert pool_key(SandboxSpec(workdir="/app"), CFG) != pool_key(SandboxSpec(workdir="/work"), CFG)
    assert pool_key(SandboxSpec(), CFG) != pool_key(SandboxSpec(resources=Resources(cpus=2)), CFG)


# --- owners: instance labels, Lease liveness, a pod that ended by itself ---


def test_a_pod_carries_its_instance_beside_its_owner():
    labels = base_labels("orch-0", SPEC, "123-abc")
    assert labels["clawgym.dev/owner"] == "orch-0" and labels["clawgym.dev/instance"] == "123-abc", labels


def test_an_instance_whose_lease_ran_out_is_gone_and_one_without_a_lease_is_unknown():
    """reap takes a gone instance's pods only: its Lease not renewed for its duration."""
    now = datetime.now(UTC)

    def lease(renewed_s_ago: float | None) -> client.V1Lease:
        renewed = now - timedelta(seconds=renewed_s_ago) if renewed_s_ago is not None else None
        return client.V1Lease(spec=client.V1LeaseSpec(lease_duration_seconds=60, renew_time=renewed))

    assert lease_liveness(lease(10), now) == "live", "renewed within its duration: a live peer"
    assert lease_liveness(lease(61), now) == "dead", "silent past its duration: gone"
    assert lease_liveness(lease(None), now) == "unknown", "never renewed: nothing to tell by"
    assert lease_liveness(client.V1Lease(), now) == "unknown"


def test_a_pod_the_out_of_memory_killer_ended_died_by_itself_and_a_deleted_one_did_not():
    """What ran in a pod ended it (its outcome) only when the OOM killer ended its container."""

    def pod(reason: str, deleting: bool = False) -> client.V1Pod:
        ended = client.V1ContainerState(
            terminated=client.V1ContainerStateTerminated(exit_code=137, reason=reason)
        )
        return client.V1Pod(
            metadata=client.V1ObjectMeta(deletion_timestamp=datetime.now(UTC) if deleting else None),
            status=client.V1PodStatus(
                phase="Failed",
                container_statuses=[
                    client.V1ContainerStatus(
                        name="sandbox", image="i", image_id="", ready=False, restart_count=0, state=ended
                    )
                ],
            ),
        )

    assert out_of_memory(pod("OOMKilled")), "OOM-killed: the sandbox's own doing"
    assert not out_of_memory(pod("Error")), "killed otherwise: the infrastructure's"
    assert not out_of_memory(pod("OOMKilled", deleting=True)), "being deleted: the infrastructure's"
