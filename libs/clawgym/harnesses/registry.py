"""Finds a harness adapter by name: `get_harness("claude-code")`. The one list of known harnesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawgym.errors import InvalidArgument, NotFound
from clawgym.harnesses.base import HarnessAdapter, Limits
from clawgym.harnesses.claude_code import ClaudeCode
from clawgym.harnesses.codex import Codex
from clawgym.harnesses.mini_swe_agent import MiniSweAgent
from clawgym.harnesses.openclaw import OpenClaw
from clawgym.harnesses.opencode import OpenCode
from clawgym.harnesses.pseudo import Nop, Oracle
from clawgym.harnesses.qwen_code import QwenCode
from clawgym.harnesses.reference import Reference

HARNESSES: dict[str, type[HarnessAdapter]] = {
    cls.name: cls
    for cls in (ClaudeCode, Codex, OpenClaw, OpenCode, QwenCode, MiniSweAgent, Reference, Oracle, Nop)
}
ALIASES = {
    "claude": "claude-code",
    "qwen": "qwen-code",
    "mini": "mini-swe-agent",
    "mini-swe": "mini-swe-agent",
}


def harness_names() -> list[str]:
    return list(HARNESSES)


def harness_class(name: str) -> type[HarnessAdapter]:
    """The adapter class of `name` (or an alias); NotFound lists the known names."""
    cls = HARNESSES.get(ALIASES.get(name, name))
    if cls is None:
        raise NotFound(f"unknown harness {name!r}; known: {', '.join(HARNESSES)}")
    return cls


def get_harness(
    name: str, cache_dir: str | Path | None = None, limits: Limits | None = None, **options: Any
) -> HarnessAdapter:
    """A fresh adapter for `name` (or an alias) with its constructor `options` (InvalidArgument for
    one the adapter does not take); NotFound lists the known names."""
    cls = harness_class(name)
    if unknown := sorted(set(options) - set(cls.options)):
        takes = ", ".join(cls.options) or "none"
        raise InvalidArgument(f"harness {cls.name} takes no {', '.join(unknown)} (its options: {takes})")
    return cls(cache_dir=cache_dir, limits=limits, **options)
