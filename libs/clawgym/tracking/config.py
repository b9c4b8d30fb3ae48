"""The `tracking` config section (`ClawgymConfig.tracking`, env `CLAWGYM_TRACKING__…`).

Owns which experiment trackers a run writes to besides the store, Prometheus and the report:
TensorBoard event files (off by default) and Weights & Biases (on when `wandb.project` is set; needs
the `clawgym[wandb]` extra).
"""

from typing import Literal

from pydantic import Field

from clawgym.section import Section


class WandbConfig(Section):
    """A Weights & Biases run mirroring the clawgym run (its id is the store run id, so a resumed run
    continues the same W&B run)."""

    project: str = Field("", description="W&B project to log to; empty = no W&B")
    entity: str = Field("", description="W&B entity (user or team); empty = the account's default")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="online: stream to W&B; offline: write under the run folder for `wandb sync`"
    )


class TrackingConfig(Section):
    """Experiment trackers: each gets every step's metrics and every evaluation's Pass@k, under the
    names the store, the report and Prometheus use (`clawgym.tracking.names`)."""

    tensorboard: bool = Field(False, description="write TensorBoard event files")
    tensorboard_dir: str = Field("", description="where the event files go; empty = <run folder>/tensorboard")
    wandb: WandbConfig = Field(default_factory=WandbConfig, description="Weights & Biases (the [wandb] extra)")
