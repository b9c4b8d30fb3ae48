"""The orchestrator service: runs batches of rollouts (sandbox → harness → verifier → reward) over gRPC."""
