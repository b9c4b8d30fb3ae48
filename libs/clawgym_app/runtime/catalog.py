"""Harness settings for a run: per-harness turn caps, reply lengths and time limits, applied to adapters.

Owns the knobs a run (quickstart, `clawgym train`) sets on the harnesses it drives, e.g. the
reference agent's `max_turns` and `max_tokens`. The orchestrator creates a fresh adapter per batch
from its `Catalog`; `SettingsCatalog` is that catalog with these settings applied, handed to the
in-process `Orchestrator` (a separate `clawgym serve orchestrator` uses each adapter's defaults).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from clawgym.harnesses.base import HarnessAdapter, Limits
from clawgym.harnesses.reference import Reference
from clawgym.harnesses.registry import ALIASES, get_harness
from clawgym.orchestrator.catalog import Catalog


class HarnessSettings(BaseModel):
    """Per-harness overrides; unset fields keep the adapter's defaults."""

    model_config = ConfigDict(extra="forbid")

    max_turns: int | None = Field(
        None, ge=1, description="model calls per rollout at most (where the CLI can cap it)"
    )
    timeout_s: float | None = Field(None, gt=0, description="wall-clock cap of one harness run")
    max_tokens: int | None = Field(None, ge=1, description="reference harness: max_tokens it asks per reply")
    mode: str | None = Field(None, description="reference harness: text (fenced bash) or tools")


class SettingsCatalog(Catalog):
    """A `Catalog` whose adapters carry `settings[harness]` (by canonical harness name)."""

    def __init__(self, settings: dict[str, HarnessSettings], **kwargs) -> None:
        super().__init__(**kwargs)
        self.settings = {ALIASES.get(k, k): v for k, v in settings.items()}

    def adapter(self, harness: str) -> HarnessAdapter:
        base = super().adapter(harness)
        s = self.settings.get(base.name)
        if s is None:
            return base
        limits = Limits(
            timeout_s=s.timeout_s or base.limits.timeout_s,
            max_turns=s.max_turns or base.limits.max_turns,
        )
        if isinstance(base, Reference):
            return Reference(
                cache_dir=self.harness_cache_dir,
                limits=limits,
                mode=s.mode or base.mode,
                max_tokens=s.max_tokens or base.max_tokens,
            )
        return get_harness(base.name, cache_dir=self.harness_cache_dir, limits=limits)
