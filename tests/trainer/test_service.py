"""The trainer service: the loop in a thread, Trainer.Status over real gRPC, /metrics over HTTP."""

import json
import time

import grpc
import httpx
import pytest

from clawgym.config import load_config
from clawgym.generated.v1 import trainer_pb2 as pb
from clawgym.generated.v1.trainer_pb2_grpc import TrainerStub
from clawgym.rpc import check_health, open_channel
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore
from clawgym_services.trainer.server import create_server


def test_the_service_reports_the_loop_over_grpc_and_exports_prometheus_metrics(
    sqlite_url, trainer_cfg, make_trainer, free_port, rpc_config, rpc_secret
):
    """Status goes to `finished` at version 2 with the last step's metrics; /metrics has the trainer's."""
    section = trainer_cfg(steps=2, host="127.0.0.1", port=0, metrics_port=free_port)
    store = SqlStore(sqlite_url, MemoryBus())
    cfg = load_config(trainer=section.model_dump(), rpc=rpc_config)
    server = create_server(cfg, trainer=make_trainer(section, store))
    try:
        port = server.start()
        assert port > 0, "the service must report the gRPC port it listens on"
        stub = TrainerStub(open_channel(f"127.0.0.1:{port}", rpc_secret))
        health = [check_health(f"127.0.0.1:{port}", "clawgym.v1.Trainer")]  # probes need no secret
        refused = {}
        for what, channel in {
            "no secret": grpc.insecure_channel(f"127.0.0.1:{port}"),
            "wrong secret": open_channel(f"127.0.0.1:{port}", "not-" + rpc_secret),
        }.items():
            with channel, pytest.raises(grpc.RpcError) as caught:
                TrainerStub(channel).Status(pb.TrainerStatusRequest(), timeout=10)
            refused[what] = caught.value.code()
        assert refused == dict.fromkeys(refused, grpc.StatusCode.UNAUTHENTICATED), refused
        seen = set()
        deadline = time.monotonic() + 300
        status = stub.Status(pb.TrainerStatusRequest(), timeout=10)
        while status.state not in ("finished", "failed") and time.monotonic() < deadline:
            seen.add(status.state)
            time.sleep(0.2)
            status = stub.Status(pb.TrainerStatusRequest(), timeout=10)
        assert server.wait(60) and server.error is None, f"the loop must end cleanly: {server.error}"
        health.append(check_health(f"127.0.0.1:{port}"))
        assert health == ["SERVING", "NOT_SERVING"], f"gRPC health while the loop runs, then once it ended: {health}"
        assert status.state == "finished" and status.step == 2 and status.policy_version == 2, status
        assert status.run_id, "Status must name the run"
        metrics = json.loads(status.metrics_json)
        assert "loss" in metrics and "logprob_mismatch" in metrics, (
            f"the last step's metrics: {sorted(metrics)}"
        )
        assert seen & {"waiting_rollouts", "training", "publishing"}, (
            f"intermediate states were reported: {seen}"
        )
        exported = httpx.get(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).text
        assert "clawgym_trainer_step 2.0" in exported, "/metrics must export the trainer's step gauge"
        assert "clawgym_trainer_tokens_per_s" in exported, "/metrics must export throughput"
    finally:
        server.stop()
        store.close()


@pytest.mark.slow
def test_a_finished_run_with_after_run_serve_keeps_answering_status_until_sigterm(
    tmp_path, free_port, rpc_secret
):
    """`clawgym serve trainer` as the chart runs it (`trainer.after_run: serve`): once the run is
    finished the process stays up (a pod would restart what exits), Status says `finished`, and
    SIGTERM ends it with 0."""
    import os
    import signal
    import subprocess
    import sys

    import yaml

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "store": {"url": f"sqlite:///{tmp_path / 'store.db'}", "bus_url": "memory://"},
        "trainer": {"model": "tiny-qwen3", "run_name": "linger", "rollout_source": "toy", "steps": 1,
                    "group_size": 2, "groups_per_step": 1, "checkpoint_uri": str(tmp_path / "ckpt"),
                    "host": "127.0.0.1", "port": free_port, "metrics_port": 0, "after_run": "serve"},
    }))  # fmt: skip
    env = {**os.environ, "CLAWGYM_RPC__SECRET": rpc_secret}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from clawgym_app.cli import main; main()", "serve", "trainer", "-c", str(config)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        state = ""
        while state != "finished":
            assert proc.poll() is None, f"the trainer exited ({proc.returncode}): {proc.stdout.read()}"
            assert time.monotonic() < deadline, f"the run did not finish in 300 s (state {state!r})"
            time.sleep(0.5)
            try:
                with open_channel(f"127.0.0.1:{free_port}", rpc_secret) as channel:
                    state = TrainerStub(channel).Status(pb.TrainerStatusRequest(), timeout=5).state
            except grpc.RpcError:
                continue
        time.sleep(3)
        assert proc.poll() is None, "a finished run with after_run: serve stays up"
        with open_channel(f"127.0.0.1:{free_port}", rpc_secret) as channel:
            assert TrainerStub(channel).Status(pb.TrainerStatusRequest(), timeout=5).state == "finished"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, proc.stdout.read()
        folder = tmp_path / "ckpt" / "linger"  # no trainer.run_dir: the run's checkpoint folder
        assert {"report.md", "summary.json", "run.json"} <= {p.name for p in folder.iterdir()}, (
            "the finished run's report lies beside its checkpoints"
        )
    finally:
        if proc.poll() is None:
            proc.kill()
