"""The orchestrator: runs batches of rollouts (register → sandbox → harness → verifier → reward → store).

`interface.RolloutService` is what the trainer and the embedded runtime use; `runner.Orchestrator`
implements it in-process, `grpc_client.OrchestratorClient` over gRPC (`clawgym serve orchestrator`);
`clawgym.assemble.open_rollouts(cfg)` picks one.
"""
