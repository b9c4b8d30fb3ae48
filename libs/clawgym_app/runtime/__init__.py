"""The app's runtime: assembling a run's parts in one process (embedded) or as clients of services."""

from clawgym.trainer.source import train_task_ids
from clawgym_app.runtime.runtime import Runtime, is_embedded, run_config

__all__ = [
    "Runtime",
    "is_embedded",
    "run_config",
    "train_task_ids",
]
