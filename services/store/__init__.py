"""The store service: the trajectory store (runs, rollouts, calls, groups, checkpoints) over gRPC."""
