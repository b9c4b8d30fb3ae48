"""The trainer service: the RL loop (`clawgym.training`) in a thread, with Trainer.Status over gRPC and /metrics."""
