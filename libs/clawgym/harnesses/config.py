"""`HarnessSettings`: what a run sets on one harness it drives (turn cap, reply length, time caps, mode).

A run config holds them per harness name in `orchestrator.harness_settings` (the orchestrator builds
the adapters, `orchestrator.catalog.Catalog.adapter`), so every command that runs harnesses from
that config (`train`, `eval`, `rollout`, `serve orchestrator`) drives them the same way:

    orchestrator:
      harness_settings:
        reference: {max_turns: 1, max_tokens: 40}

Unset fields keep the adapter's defaults. Not here: how an adapter turns them into its command line
(each adapter module).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from clawgym.section import Section


class HarnessSettings(Section):
    """One harness's overrides; unset (None) fields keep the adapter's defaults."""

    max_turns: int | None = Field(
        None, ge=1, description="model calls per rollout at most (where the harness's CLI can cap it)"
    )
    timeout_s: float | None = Field(
        None, gt=0, description="wall-clock cap of one harness run (over orchestrator.harness_timeout_s)"
    )
    max_tokens: int | None = Field(
        None, ge=1, description="reference and mini-swe-agent: the max_tokens they ask for per reply"
    )
    mode: str | None = Field(
        None,
        description="reference and mini-swe-agent: text (a fenced command) or tools (a bash function tool)",
    )
    command_timeout_s: float | None = Field(
        None, gt=0, description="reference harness: seconds one shell command may run before it is killed"
    )
    fences: list[str] | None = Field(
        None,
        description="mini-swe-agent text mode: the code-fence languages an action may use "
        "(its own: mswea_bash_command; add bash for 1.x's fence)",
    )
    client: str | None = Field(
        None,
        description="mini-swe-agent: what sends its requests, litellm (its default) or direct (its own "
        "OpenRouter model classes pointed at the proxy: the same agent without litellm's ~2.6 s import)",
    )
    context_window: int | None = Field(
        None,
        ge=1,
        description="claude-code: the policy's context in tokens, so that the CLI compacts its conversation "
        "at 80% of it (unset: it assumes 1M tokens for a model it does not know and never compacts first)",
    )

    gc_markers: int | None = Field(
        None,
        ge=0,
        description="opencode: its JavaScript engine's garbage-collector marking threads "
        "(BUN_JSC_numberOfGCMarkers; unset: 1, 0: the engine's own default). Its parallel markers spin "
        "while it waits on a model call, taking a small machine's cores from the policy",
    )

    def options(self) -> dict[str, Any]:
        """The adapter constructor options these settings set (`HarnessAdapter.options` names them)."""
        names = (
            "max_tokens",
            "mode",
            "command_timeout_s",
            "fences",
            "client",
            "context_window",
            "gc_markers",
        )
        return {k: v for k in names if (v := getattr(self, k)) is not None}
