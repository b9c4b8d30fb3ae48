"""The RL trainer: the loop over rollout groups, checkpoints the engines hot-reload, resume, FSDP2.

Owns turning the store's groups into policy updates and published checkpoints; not the maths
(`clawgym.rl`), the trees (`clawgym.trajectory`) or the service shell (`clawgym_services.trainer`).

In-process use (the embedded runtime), all parts built by the caller and passed in:

>>> from clawgym.trainer import Trainer, TrainerConfig, ToyRolloutSource, LoopThread
>>> trainer = Trainer(TrainerConfig(model="tiny-qwen3", steps=10), store=store, bus=store.bus,
...                   source=source, tokenizer=tokenizer, engines=[engine], runner=runner)
>>> trainer.run()          # or trainer.run(steps=1) to step; trainer.status for progress

or from a whole `ClawgymConfig`: `clawgym.assemble.build_trainer(cfg).run()` (what `clawgym serve
trainer` and the embedded runtime do).
Modules, in the order a step uses them: `config`, `source` (+ `toy`), `feed`, `batch`, `policy`,
`update`, `optim`, `checkpoint`, `metrics`, `distributed`, `loop`, `loop_thread`.

Names are resolved on first use, so that `clawgym.config` can import `trainer.config` without
importing torch.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "TrainerConfig": "clawgym.trainer.config",
    "AlgorithmConfig": "clawgym.trainer.config",
    "Trainer": "clawgym.trainer.loop",
    "TrainerStatus": "clawgym.trainer.loop",
    "RolloutSource": "clawgym.trainer.source",
    "RolloutServiceSource": "clawgym.trainer.source",
    "ToyRolloutSource": "clawgym.trainer.toy",
    "LoopThread": "clawgym.trainer.loop_thread",
    "TrainerMetrics": "clawgym.trainer.metrics",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'clawgym.trainer' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)
