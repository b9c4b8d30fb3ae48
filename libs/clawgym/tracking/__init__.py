"""Experiment tracking: a run's step metrics and evaluations in TensorBoard and W&B, under the same
names as the store, the report and Prometheus (`names`), through one `Tracker` (`writers`)."""

from clawgym.tracking.config import TrackingConfig, WandbConfig
from clawgym.tracking.names import eval_scalars, step_scalars
from clawgym.tracking.writers import MetricSink, Tracker

__all__ = ["MetricSink", "Tracker", "TrackingConfig", "WandbConfig", "eval_scalars", "step_scalars"]
