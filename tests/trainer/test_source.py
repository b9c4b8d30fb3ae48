"""The trainer's rollout source over a real gRPC orchestrator client: an orchestrator that goes away
(a pod replaced) cuts its batches short without ending the run; other batch errors still surface."""

import time

from clawgym.orchestrator.grpc_client import OrchestratorClient
from clawgym.orchestrator.interface import Batch, RolloutRequest
from clawgym.trainer.source import UNAVAILABLE_BACKOFF_S, RolloutServiceSource


def _batch(batch_id: str) -> Batch:
    return Batch("run-1", (RolloutRequest("mini/a", "reference", 2),), batch_id=batch_id)


def test_an_unreachable_orchestrator_cuts_batches_short_and_backs_off_without_failing_the_run(
    runner, free_port, rpc_secret
):
    """Nothing listens on the port: each batch fails UNAVAILABLE. The source logs it, counts the
    batch as no longer pending (so the trainer asks again) and does not raise it from `check()`;
    the next batch waits out the backoff before it dials."""
    client = OrchestratorClient(f"127.0.0.1:{free_port}", secret=rpc_secret)
    source = RolloutServiceSource(client, runner, ["mini/a"], close_service=True)
    try:
        source.request(_batch("first"))
        deadline = time.monotonic() + 30
        while source.pending_groups() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert source.pending_groups() == 0, "the cut batch no longer counts as pending"
        source.check()  # an orchestrator restart is not the run's end: nothing raised
        started = time.monotonic()
        source.request(_batch("second"))
        assert source.pending_groups() == 1
        while source.pending_groups() and time.monotonic() < deadline:
            time.sleep(0.05)
        waited = time.monotonic() - started
        assert waited >= UNAVAILABLE_BACKOFF_S * 0.8, f"the next batch dialled after {waited:.2f} s, not backing off"
        source.check()
    finally:
        source.close()
