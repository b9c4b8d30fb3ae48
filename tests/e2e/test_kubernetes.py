"""End to end on Kubernetes: a mini-suite task runs in a real pod of k8s-local, through the real proxy.

The pod uses hostNetwork and the Debian python3+node image, so the reference harness (python3,
nothing to install) reaches the proxy on the node's 127.0.0.1 exactly as a local sandbox would.
The orchestrator, proxy and store run in this process; afterwards no pod of the run's owner is left.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import numpy as np
import pytest
from kubernetes import client, config

from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.sandbox.interface import OWNER_LABEL

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(1800)]


def test_a_task_runs_end_to_end_in_a_host_network_pod_and_leaves_nothing_behind(
    k8s_cluster, stack, scripted, write_word, tokenizer
):
    """reference harness in a pod → proxy on 127.0.0.1 → scripted policy; the verifier in the same pod
    gives 1.0, the calls are stored, and once the orchestrator closes no pod of its owner exists."""
    owner = f"e2e-k8s-{uuid.uuid4().hex[:8]}"
    sandbox = {
        "backend": "kubernetes",
        "owner": owner,
        "kubernetes": {
            "kubeconfig": k8s_cluster.kubeconfig,
            "namespace": k8s_cluster.namespace,
            "image": k8s_cluster.image,
            "image_pull_policy": "Never",
            "host_network": True,
            "max_threads": 16,
        },
    }
    first = f"```bash\n{write_word.command}\n```"
    s = stack(
        scripted(first, "DONE"),
        sandbox=sandbox,
        sandbox_resources={"limits": {"cpu": "1", "memory": "512Mi"}},
    )
    run = s.store.create_run("e2e-k8s")
    batch = Batch(run.id, [RolloutRequest(write_word.task.id, "reference")])

    async def scenario():
        statuses = [st async for st in s.orchestrator.run_rollouts(batch)]
        await s.orchestrator.close()
        return statuses

    statuses = asyncio.run(scenario())
    final = statuses[-1]
    assert [st.state for st in statuses] == ["registered", "running", "verifying", "finished"], statuses
    assert final.reward == 1.0 and final.passed, f"the verifier in the pod gives 1.0: {final.error}"
    record = s.store.get_rollout(final.rollout_id)
    assert record.sandbox.startswith("clawgym-sbx"), f"the store names the pod: {record.sandbox!r}"
    calls = s.store.list_calls(final.rollout_id)
    assert len(calls) == 2, f"one acting call and the DONE call, got {len(calls)}"
    prefix = np.concatenate([calls[0].prompt_ids, calls[0].output_ids])
    assert np.array_equal(calls[1].prompt_ids[: len(prefix)], prefix), "call 1 extends call 0's prompt+output"

    core = client.CoreV1Api(config.new_client_from_config(config_file=k8s_cluster.kubeconfig))
    deadline = time.monotonic() + 60
    while pods := core.list_namespaced_pod(
        k8s_cluster.namespace, label_selector=f"{OWNER_LABEL}={owner}"
    ).items:
        assert time.monotonic() < deadline, f"pods of {owner} still exist: {[p.metadata.name for p in pods]}"
        time.sleep(0.5)
