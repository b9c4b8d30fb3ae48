"""The whole system trains inside Kubernetes (k8s-local) and survives pod loss (issue #15).

`helm install` with values-k8s-local.yaml brings up the chart's PostgreSQL and Redis, the store,
2 inference replicas, 2 proxy replicas, the orchestrator (one sandbox pod per rollout) and the
trainer, whose GRPO run of tiny-qwen3 through the reference harness goes on while this test deletes
an inference pod, a proxy pod, the trainer pod, a sandbox pod and the orchestrator pod
(`--grace-period=0 --force`; the orchestrator's processes SIGKILLed on the node first) at different
moments, and a witness harness of ours calls the proxy throughout. Then: `helm test`,
and `helm upgrade` with a changed value. Every check reads the release's own PostgreSQL and services.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from deploy.k8s_local_run import PREFIX, ChaosRun, ClusterRelease, kube_env, run_with_chaos

pytestmark = [pytest.mark.k8s, pytest.mark.slow, pytest.mark.timeout(3600)]

STEPS = 8
GROUPS_PER_STEP = 2
EVERY_STEPS = 6  # one evaluation between steps, after the chaos of steps 1-5
RUN_DEADLINE_S = 1800


@pytest.fixture(scope="module")
def release(k8s_cluster, k8s_tools, k8s_local_image, tmp_path_factory) -> Iterator[ClusterRelease]:
    r = ClusterRelease(
        kube_env(k8s_cluster.kubeconfig, k8s_tools),
        k8s_local_image,
        tmp_path_factory.mktemp("checkpoints"),
        steps=STEPS,
        extra_sets={
            "trainer.runConfig.trainer.groups_per_step": str(GROUPS_PER_STEP),
            # the trainer service runs clawgym train's Run: an evaluation between steps, TensorBoard
            "trainer.runConfig.evaluation.every_steps": str(EVERY_STEPS),
            "trainer.runConfig.tracking.tensorboard": "true",
        },
    )
    try:
        seconds = r.install()
    except Exception as e:
        report = r.report()
        r.uninstall()
        pytest.fail(f"helm install --wait failed: {e}\n{report}")
    print(f"helm install --wait of the whole system: {seconds:.0f} s")
    yield r
    r.uninstall()


@pytest.fixture(scope="module")
def chaos_run(release: ClusterRelease) -> ChaosRun:
    """The release's training run, followed to its end while its pods are deleted."""
    run = run_with_chaos(release, deadline_s=RUN_DEADLINE_S)
    if not run.finished:
        pytest.fail(f"the run did not finish within {RUN_DEADLINE_S} s (pods deleted: {run.killed})\n{release.report()}")
    print(f"in-cluster run of {STEPS} steps with chaos: {run.seconds:.0f} s (pod deletions: {run.kills})")
    return run


def test_the_run_completes_its_steps_through_pod_loss(release, chaos_run):
    r, run_id = release, chaos_run.run_id
    assert set(chaos_run.killed) == {"inference", "proxy", "trainer", "sandbox", "orchestrator"}, (
        f"every chaos event happened during the run: {chaos_run.killed}"
    )
    assert r.versions(run_id) == list(range(1, STEPS + 1)), "every version registered once, in order"
    steps = r.query("SELECT step FROM train_steps WHERE run_id = :r ORDER BY step", r=run_id)
    assert [s for (s,) in steps] == list(range(1, STEPS + 1)), "one recorded step per version"
    evals = r.query("SELECT version, harness FROM evals WHERE run_id = :r ORDER BY version", r=run_id)
    assert evals == [(0, "reference"), (EVERY_STEPS, "reference"), (STEPS, "reference")], (
        f"Pass@1 evaluated before, every {EVERY_STEPS} steps and after, each once (a restarted trainer "
        f"repeats none): {evals}"
    )


def test_the_trainer_leaves_its_report_in_its_run_folder_beside_its_checkpoints(release, chaos_run):
    """The trainer service runs the library's Run, as `clawgym train` does: its run folder (the run's
    checkpoint folder, on the node's hostPath) holds the report and summary of the whole run, the
    evaluations before, between steps and after, and TensorBoard events, though the trainer pod was
    deleted on the way."""
    folder = release.checkpoints_dir / f"k8s-{release.namespace}"
    deadline = time.monotonic() + 180  # Status says finished before the last report is written
    while not (folder / "summary.json").is_file() and time.monotonic() < deadline:
        time.sleep(2)
    held = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    assert {"report.md", "report.json", "summary.json", "run.json"} <= held, held
    labels = sorted({e["label"] for e in json.loads((folder / "report.json").read_text())["evals"]})
    assert labels == ["after", "before", f"step {EVERY_STEPS}"], labels
    assert list((folder / "tensorboard").glob("events.out.tfevents.*")), "TensorBoard events beside the report"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == STEPS and "pass1_after" in summary and "pass1_before" in summary, summary


def test_every_inference_replica_serves_every_version_published_while_it_was_up(release, chaos_run):
    """Each replica's own log says which checkpoints it loaded, and when (polling its Status can miss a
    version that the next one replaced within a poll)."""
    r = release
    published = r.published(chaos_run.run_id)
    steady = r.loads(f"{PREFIX}-inference-0")  # never deleted: its log holds every load
    assert set(published) <= {v for _, v in steady}, (
        f"replica 0 (never killed) loaded {sorted(v for _, v in steady)} of {sorted(published)}"
    )
    # the killed replica comes back (a new pod) serving version 0 and out of service; the trainer's
    # probe loads the newest published checkpoint into it before admitting it, and from then on every
    # publish reaches it (a version published while it was out is not waited for)
    restarted = r.loads(f"{PREFIX}-inference-1")
    assert restarted, f"replica 1 was never loaded again after its pod was deleted\n{r.report()}"
    admitted_at, first = restarted[0]
    assert admitted_at > chaos_run.killed["inference"], f"replica 1's log is its deleted pod's: {restarted}"
    newest_then = max((v for v, at in published.items() if at <= admitted_at - 1), default=0)
    assert first >= newest_then, (
        f"replica 1 was loaded with v{first} when v{newest_then} was already published: {restarted}"
    )
    later = {v for v, at in published.items() if at > admitted_at + 1}
    loaded = {v for _, v in restarted}
    assert later <= loaded and STEPS in loaded, (
        f"replica 1 loaded {sorted(loaded)}; published after it was loaded again: {sorted(later)}, the last v{STEPS}"
    )


def test_calls_come_from_both_proxy_replicas_and_every_acknowledged_call_is_stored(release, chaos_run):
    r = release
    # read in Python: a tiny policy's text may hold \u0000, which PostgreSQL's json operators refuse
    responses = r.query(
        "SELECT c.response FROM calls c JOIN rollouts o ON o.id = c.rollout_id WHERE o.run_id = :r",
        r=chaos_run.run_id,
    )
    proxies = {resp["_clawgym"]["proxy"] for (resp,) in responses}
    assert len(proxies) >= 2, f"calls recorded by proxy pods: {proxies}"
    witness = chaos_run.witness
    assert len(witness.acknowledged) >= 10, f"the witness got few answers: {witness.errors[-5:]}"
    lost = chaos_run.calls_lost(r)
    assert not lost, f"{len(lost)} of {len(witness.acknowledged)} acknowledged calls are not in PostgreSQL"


def test_no_group_is_trained_twice_and_cut_rollouts_are_failed_never_rewarded(release, chaos_run):
    r, run_id = release, chaos_run.run_id
    taken_again = r.groups_taken_again(run_id)
    assert not taken_again, (
        f"checkpoints whose trained groups do not all name them as consumer (version: trained, consumed): "
        f"{taken_again}: a later step took some again"
    )
    unended = r.query(
        "SELECT id, status FROM rollouts WHERE run_id = :r AND ended_at IS NULL", r=run_id
    )
    assert not unended, f"rollouts never ended (their groups never complete): {unended}"
    failed = r.query(
        "SELECT id, reward, error FROM rollouts WHERE run_id = :r AND status = 'failed'", r=run_id
    )
    assert all(reward is None for _, reward, _ in failed), f"a failed rollout got a reward: {failed}"
    sandbox_pod = chaos_run.pods["sandbox"]
    in_pod = [f for f in failed if sandbox_pod in (f[2] or "")]
    assert in_pod, f"the rollout in sandbox pod {sandbox_pod} failed as an infrastructure failure: {failed}"
    retried = r.query(
        "SELECT count(*) FROM rollouts WHERE group_id = (SELECT group_id FROM rollouts WHERE id = :i) "
        "AND created_at > (SELECT created_at FROM rollouts WHERE id = :i)",
        i=in_pod[0][0],
    )[0][0]
    assert retried >= 1, "the rollout cut by its sandbox pod's deletion was retried by a fresh one in its group"
    cut = [f for f in failed if "orchestrator" in (f[2] or "")]
    assert cut, (
        f"none of the orchestrator's {chaos_run.kills['orchestrator']} deletions cut a rollout (failed ones: {failed})"
    )


def test_rollouts_spread_over_both_inference_replicas(release, chaos_run):
    """Each replica's own /metrics (port metricsPort + N) counts the Generate requests it served."""
    import re
    import urllib.request

    served = []
    for i in range(release.inference_replicas):
        port = release.ports["inference.metricsPort"] + i
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        served.append(sum(float(v) for v in re.findall(r'^clawgym_inference_requests_total\{[^}]*\} (\S+)$', text, re.M)))
    assert all(n > 0 for n in served), f"Generate requests served per replica: {served}"


def test_helm_test_checks_the_working_install(release, chaos_run):
    done = release.run("helm", "test", "cg", "-n", release.namespace, "--logs", "--timeout", "180s",
                       timeout=240, check=False)  # fmt: skip
    assert done.returncode == 0, f"helm test failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "SERVING" in done.stdout and "healthz: 200" in done.stdout, done.stdout


def test_helm_upgrade_rolls_the_deployments_without_losing_the_runs_data(release, chaos_run):
    r = release
    counts = "SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM rollouts), (SELECT count(*) FROM checkpoints)"
    before = r.query(counts)[0]
    old_proxies = {p["metadata"]["name"] for p in r.pods("proxy")}
    old_store = {p["metadata"]["name"] for p in r.pods("store")}
    r.extra_sets["proxy.env.CLAWGYM_PROXY__MAX_NEW_TOKENS"] = "40"
    r.extra_sets["store.resources.limits.memory"] = "1536Mi"  # the store rolls too (its ports are the host's)
    r.helm("upgrade", "--wait", "--timeout", "600s", timeout=660)
    new_proxies = {p["metadata"]["name"] for p in r.pods("proxy") if not p["metadata"].get("deletionTimestamp")}
    assert new_proxies and not (new_proxies & old_proxies), f"proxy pods not rolled: {old_proxies} -> {new_proxies}"
    new_store = {p["metadata"]["name"] for p in r.pods("store") if not p["metadata"].get("deletionTimestamp")}
    assert new_store and not (new_store & old_store), f"store pod not replaced: {old_store} -> {new_store}"
    env = [e for p in r.pods("proxy") for c in p["spec"]["containers"] for e in c.get("env", [])]
    assert {"name": "CLAWGYM_PROXY__MAX_NEW_TOKENS", "value": "40"} in env, "the changed value reached the pods"
    after = r.query(counts)[0]
    assert all(a >= b for a, b in zip(after, before, strict=True)), f"rows lost: {before} -> {after}"
    assert r.versions(chaos_run.run_id) == list(range(1, STEPS + 1))
