"""The trackers a run writes to: TensorBoard event files and a Weights & Biases run, behind one sink.

Owns turning `tracking` settings into writers and handing each the same scalars at the same step
(the policy version); not the names (`names`) nor when a run logs (the app's training run). Both
libraries are imported only when enabled: TensorBoard's writer is torch's
(`torch.utils.tensorboard`, the `tensorboard` package), W&B is the optional `clawgym[wandb]` extra.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Protocol

from clawgym.errors import FailedPrecondition
from clawgym.tracking.config import TrackingConfig

log = logging.getLogger(__name__)

TENSORBOARD_DIR = "tensorboard"
WANDB_DIR = "wandb"


def check_available(cfg: TrackingConfig) -> None:
    """FailedPrecondition now, before a run loads anything, for a tracker whose package is missing."""
    import importlib.util

    if cfg.wandb.project and importlib.util.find_spec("wandb") is None:
        raise FailedPrecondition(_NO_WANDB)
    if cfg.tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise FailedPrecondition("tracking.tensorboard needs the tensorboard package (a clawgym dependency)")


_NO_WANDB = "tracking.wandb.project is set but wandb is not installed: pip install 'clawgym[wandb]'"


class MetricSink(Protocol):
    # whether the sink holds nothing of this run yet (a resumed run then replays its earlier steps)
    fresh: bool

    def log(self, step: int, scalars: dict[str, float]) -> None: ...
    def close(self) -> None: ...


class TensorBoardSink:
    """Scalars into TensorBoard event files under `logdir` (one tag per name)."""

    def __init__(self, logdir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as e:  # torch's writer needs the `tensorboard` package
            raise FailedPrecondition(f"tracking.tensorboard needs the tensorboard package: {e}") from e
        self.logdir = logdir
        self.fresh = not any(logdir.glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(log_dir=str(logdir))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, global_step=step)
        self.writer.flush()  # a killed run keeps what it logged

    def close(self) -> None:
        self.writer.close()


class WandbSink:
    """Scalars into a W&B run whose id is the store run id (`resume="allow"`: a resumed run goes on)."""

    def __init__(self, cfg: TrackingConfig, run_id: str, name: str, folder: Path, config: dict[str, Any]) -> None:
        try:
            import wandb
        except ImportError:
            raise FailedPrecondition(_NO_WANDB) from None
        w = cfg.wandb
        self.fresh = False  # resume="allow" continues the W&B run, which has the earlier steps
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=w.project, entity=w.entity or None, mode=w.mode, id=run_id, name=name, resume="allow",
            dir=str(folder), config=config,
        )  # fmt: skip

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


class Tracker:
    """Every enabled sink; `log` hands each the same scalars. A sink that fails is logged and
    dropped: a tracker never stops a training run (the store keeps the record)."""

    def __init__(self, sinks: list[MetricSink] | None = None) -> None:
        self.sinks = list(sinks or [])

    @classmethod
    def open(
        cls, cfg: TrackingConfig, run_dir: Path, *, run_id: str, name: str, config: dict[str, Any] | None = None
    ) -> Tracker:
        """The sinks `cfg` enables, writing under `run_dir` unless told elsewhere."""
        sinks: list[MetricSink] = []
        try:
            if cfg.tensorboard:
                logdir = Path(cfg.tensorboard_dir) if cfg.tensorboard_dir else run_dir / TENSORBOARD_DIR
                sinks.append(TensorBoardSink(logdir))
            if cfg.wandb.project:
                sinks.append(WandbSink(cfg, run_id, name, run_dir / WANDB_DIR, config or {}))
        except BaseException:
            cls(sinks).close()
            raise
        return cls(sinks)

    def log(self, step: int, scalars: dict[str, float], *, replay: bool = False) -> None:
        """Hands `scalars` of `step` to every sink; `replay`: an earlier process's step (a resumed
        run's), only to the sinks that do not hold it yet."""
        for sink in [s for s in self.sinks if s.fresh or not replay]:
            try:
                sink.log(step, scalars)
            except Exception:
                log.exception("tracker %s failed; it is dropped for the rest of the run", type(sink).__name__)
                self.sinks.remove(sink)

    def close(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except Exception:
                log.exception("closing tracker %s failed", type(sink).__name__)
        self.sinks.clear()
