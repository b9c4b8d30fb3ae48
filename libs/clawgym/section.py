"""`Section`: the base of every config section, a leaf module that imports nothing of clawgym.

Each package owns its section beside its code (`clawgym.store.config.StoreConfig`, …) on this
base; `clawgym.config` only assembles them. Unknown keys are errors, so a typo fails at start.
"""

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    """A config section: typed fields, each with a `description` (shown by `--help`)."""

    model_config = ConfigDict(extra="forbid")
