"""The app's runtime: assembling a run's parts in one process (embedded) or as clients of services."""

from clawgym.assemble import is_embedded, run_config
from clawgym.trainer.source import train_task_ids
from clawgym_app.runtime.runtime import Runtime

__all__ = [
    "Runtime",
    "is_embedded",
    "run_config",
    "train_task_ids",
]
