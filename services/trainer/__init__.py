"""The trainer service: the RL loop (`clawgym.trainer`) in a thread, with Trainer.Status over gRPC and /metrics."""
