"""The orchestrator: runs batches of rollouts (register → sandbox → harness → verifier → reward → store).

`interface.RolloutService` is what the trainer and the embedded runtime use; `runner.Orchestrator`
implements it in-process, `grpc_client.OrchestratorClient` over gRPC (`clawgym serve orchestrator`).
This package keeps its import light (`clawgym.config` imports `orchestrator.config`).
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clawgym.config import ClawgymConfig
    from clawgym.orchestrator.interface import RolloutService
    from clawgym.store.interface import TrajectoryStore


async def open_rollout_service(
    cfg: "ClawgymConfig", store: "TrajectoryStore | None" = None
) -> "RolloutService":
    """The rollout service a config names: the orchestrator service at `orchestrator.grpc_url` if set,
    else an in-process `Orchestrator` (on `store`, or the one `cfg.store` names), already started."""
    if cfg.orchestrator.grpc_url:
        from clawgym.orchestrator.grpc_client import OrchestratorClient

        return OrchestratorClient(cfg.orchestrator.grpc_url)
    from clawgym.orchestrator.runner import Orchestrator

    orchestrator = Orchestrator.from_config(cfg, store=store)
    await orchestrator.start()
    return orchestrator
