"""The app's runtime: assembling a run's parts in one process (embedded) or as clients of services."""

from clawgym.trainer.source import train_task_ids
from clawgym_app.runtime.catalog import HarnessSettings, SettingsCatalog
from clawgym_app.runtime.runtime import Runtime, embedded_config, is_embedded

__all__ = [
    "HarnessSettings",
    "Runtime",
    "SettingsCatalog",
    "embedded_config",
    "is_embedded",
    "train_task_ids",
]
