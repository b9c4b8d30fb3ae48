"""The Docker CLI as the docker backend calls it: one place for its path, its environment and errors.

The backend drives the engine through the `docker` CLI rather than an SDK: it is what the engine
ships, it speaks every engine version the CLI does, and `docker exec`/`docker cp` stream stdin,
stdout and tar archives without a client library. Blocking work never runs on the event loop:
async calls are subprocesses (`process.run_tree`), builds run in a thread.

Secrets stay out of argv (which every local user can read in /proc): an exec's environment is
passed as `-e NAME` with the value in the CLI's own environment, which only the CLI sees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence

from clawgym.sandbox.config import DockerSandboxConfig
from clawgym.sandbox.environment import check_env
from clawgym.sandbox.interface import ExecResult, SandboxFailed
from clawgym.sandbox.process import run_tree

# What the CLI itself reads from its environment: never taken from a sandbox's env.
_CLI_VARS = (
    "PATH",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
)


class DockerCli:
    """Runs `docker ...` against one engine."""

    def __init__(self, cfg: DockerSandboxConfig) -> None:
        found = shutil.which(cfg.cli)
        if found is None:
            raise SandboxFailed(f"the Docker CLI {cfg.cli!r} is not installed (sandbox.docker.cli)")
        self.path = found
        self.env = {k: os.environ[k] for k in _CLI_VARS if k in os.environ}
        self.env["DOCKER_BUILDKIT"] = os.environ.get("DOCKER_BUILDKIT", "0")  # buildx is often absent
        if cfg.host:
            self.env["DOCKER_HOST"] = cfg.host

    def cli_env(self, passed: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
        """(the CLI's environment, its `-e` flags) that give a container command `passed`.

        The CLI runs on this host: `passed` may hold no loader variable (`environment`), which
        would make the CLI itself load code a task named."""
        check_env(passed, "exec env")
        env, flags = dict(self.env), []
        for name, value in passed.items():
            if name in _CLI_VARS or name.startswith("DOCKER_"):
                flags += ["-e", f"{name}={value}"]  # would steer the CLI itself: in argv instead
            else:
                env[name] = value
                flags += ["-e", name]
        return env, flags

    async def run(
        self,
        args: Sequence[str],
        *,
        timeout_s: float = 120.0,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        max_output_bytes: int = 16 << 20,
    ) -> ExecResult:
        """`docker args...` to completion (a timeout kills the CLI, not what it started)."""
        try:
            return await run_tree(
                [self.path, *args],
                env=env if env is not None else self.env,
                timeout_s=timeout_s,
                max_output_bytes=max_output_bytes,
                stdin=stdin,
            )
        except OSError as e:
            raise SandboxFailed(f"cannot run {self.path}: {e}") from e

    async def check(self, args: Sequence[str], *, what: str, **kwargs) -> bytes:
        """`run`, and SandboxFailed naming `what` unless it exits 0; returns stdout."""
        result = await self.run(args, **kwargs)
        if not result.ok:
            raise SandboxFailed(f"{what} failed: {error_text(result)}")
        return result.stdout

    def run_sync(
        self, args: Sequence[str], *, timeout_s: float, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess:
        """The blocking form, for threads (image builds)."""
        try:
            return subprocess.run(
                [self.path, *args], input=stdin, capture_output=True, env=self.env, timeout=timeout_s
            )
        except subprocess.TimeoutExpired as e:
            raise SandboxFailed(f"docker {' '.join(args[:2])} timed out after {timeout_s:.0f}s") from e
        except OSError as e:
            raise SandboxFailed(f"cannot run {self.path}: {e}") from e


def error_text(result: ExecResult | subprocess.CompletedProcess) -> str:
    """The CLI's complaint, shortened (exit code and the last of stderr, else stdout)."""
    code = result.exit_code if isinstance(result, ExecResult) else result.returncode
    text = (result.stderr or result.stdout or b"").decode("utf-8", "replace").strip()
    timed_out = isinstance(result, ExecResult) and result.timed_out
    return f"exit {code}{' (timed out)' if timed_out else ''}: {text[-1500:]}"
