"""Provisions a task's setup steps on the host, cached, instead of building the task's image.

- pip packages: `pip install --target <cache>/pip-<hash>` once per package set, wheels only; the
  sandbox gets the folder on PYTHONPATH. The pytest that Terminal-Bench tests run with comes the
  same way.
- npm packages: `npm install --prefix <cache>/npm-<hash>` without lifecycle scripts; its `.bin`
  goes on PATH.
- apt packages: must be installed on the host (the sandbox's read-only system is the host's);
  missing ones are installed when we are root with apt-get, else the task is unsupported here.

Installs run on this host, so a suite (third-party input) may only name plain registry packages
(`package_problem`): never a path, URL, archive or VCS source, whose build or install code would
run here; and nothing it installs runs code at install time (no sdist builds, no npm scripts).

The cache must be visible inside sandboxes: add `PROVISION_DIR` to the local backend's
`ro_paths` (`clawgym tasks check` does). Installs happen under a file lock and a marker file,
so concurrent callers share one install and a crashed one is redone.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from clawgym.errors import FailedPrecondition
from clawgym.sandbox.environment import DEFAULT_PATH
from clawgym.tasks.model import SetupStep, Task

PROVISION_DIR = Path.home() / ".cache" / "clawgym" / "provision"
PYTEST_REQUIREMENT = "pytest==8.4.1"  # the version Terminal-Bench's run-tests.sh installs
MARKER = ".clawgym-provisioned"


class Unsupported(FailedPrecondition):
    """The local backend cannot run this task (it needs a service, its own image, a missing package)."""


@dataclass
class Provisioned:
    """What a sandbox needs to see a task's provisioned packages."""

    env: dict[str, str] = field(default_factory=dict)
    paths: list[Path] = field(default_factory=list)  # host folders the sandbox must see read-only


# A task's packages are installed on this host, so only plain registry packages: a path, URL,
# archive or VCS source would run the suite's own build or install code here.
_PIP_ARCHIVE = re.compile(r"\.(whl|zip|tar|tgz|tar\.gz|tar\.bz2|tar\.xz|egg)$", re.IGNORECASE)
_NPM_PACKAGE = re.compile(r"^(@[a-z0-9~-][a-z0-9._~-]*/)?[a-z0-9~-][a-z0-9._~-]*(@[^\s/:\\]+)?$")
_APT_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+(:[a-z0-9-]+)?(=[A-Za-z0-9.+:~-]+)?$")


def package_problem(manager: str, spec: str) -> str | None:
    """Why `spec` is not a plain package of `manager`'s registry; None when it is."""
    if manager == "pip":
        try:
            requirement = Requirement(spec)
        except InvalidRequirement:
            requirement = None
        if requirement is None or requirement.url or _PIP_ARCHIVE.search(spec) or "/" in spec:
            return f"pip package {spec!r} is not a requirement from the package index"
    elif manager == "npm" and not _NPM_PACKAGE.match(spec):
        return f"npm package {spec!r} is not a package name from the registry"
    elif manager == "apt" and not _APT_PACKAGE.match(spec):
        return f"apt package {spec!r} is not a Debian package name"
    return None


def packages_problem(manager: str, packages: Sequence[str]) -> str | None:
    """The first of `packages` that is not a plain registry package, said as `package_problem`."""
    return next(filter(None, (package_problem(manager, p) for p in packages)), None)


def npm_install_argv(folder: Path) -> list[str]:
    """`npm install` into `folder` (its node_modules), quietly: what task packages and harnesses both run."""
    return ["npm", "install", "--prefix", str(folder), "--no-audit", "--no-fund", "--loglevel=error"]


class Provisioner:
    """Installs setup steps into `cache_dir`, once per distinct package set."""

    def __init__(self, cache_dir: str | Path | None = None, python: str = sys.executable) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else PROVISION_DIR
        self.python = python

    def for_task(self, task: Task, with_pytest: bool | None = None, task_images: bool = False) -> Provisioned:
        """Provisions `task.setup` (plus pytest for pytest verifiers); Unsupported if it cannot.

        `task_images`: the sandbox runs the task's own image (if it has one), which holds its setup
        already: only pytest is provisioned (mounted read-only, for an image that lacks it)."""
        if task_images:
            task = task.in_own_image()
        if reason := task.unsupported_by(task_images):
            raise Unsupported(f"task {task.id}: {reason}")
        steps = list(task.setup)
        if with_pytest if with_pytest is not None else task.verifier.kind == "pytest":
            steps.append(SetupStep("pip", (PYTEST_REQUIREMENT,)))
        return self.provision(steps)

    def provision(self, steps: Sequence[SetupStep]) -> Provisioned:
        out = Provisioned()
        pythonpath, path = [], []
        for step in steps:
            if not step.packages:
                continue
            if problem := packages_problem(step.manager, step.packages):
                raise Unsupported(problem)
            if step.manager == "apt":
                self._apt(step.packages)
            elif step.manager == "pip":
                folder = self._cached("pip", step.packages, self._pip)
                pythonpath.append(str(folder))
                out.paths.append(folder)
            elif step.manager == "npm":
                folder = self._cached("npm", step.packages, self._npm)
                path.append(str(folder / "node_modules" / ".bin"))
                out.paths.append(folder)
        if pythonpath:
            out.env["PYTHONPATH"] = ":".join(pythonpath)
        if path:
            out.env["PATH"] = ":".join([*path, DEFAULT_PATH])
        return out

    # --- installers ---

    def _cached(self, manager: str, packages: Sequence[str], install) -> Path:
        key = hashlib.sha256("\n".join(sorted(packages)).encode()).hexdigest()[:16]
        folder = self.cache_dir / f"{manager}-{key}"
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (folder / MARKER).is_file():
                shutil.rmtree(folder, ignore_errors=True)
                folder.mkdir()
                install(folder, packages)
                (folder / MARKER).write_text("\n".join(packages) + "\n")
        return folder

    def _pip(self, folder: Path, packages: Sequence[str]) -> None:
        _run(
            [
                self.python,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "-q",
                "--target",
                str(folder),
                "--only-binary=:all:",  # wheels only: an sdist's build would run its code here
                *packages,
            ],
            f"pip install {' '.join(packages)}",
        )

    def _npm(self, folder: Path, packages: Sequence[str]) -> None:
        # no lifecycle scripts: a package's install script would run as this host's user
        argv = [*npm_install_argv(folder), "--ignore-scripts", *packages]
        _run(argv, f"npm install {' '.join(packages)}")

    def _apt(self, packages: Sequence[str]) -> None:
        missing = [p for p in packages if not _dpkg_installed(p)]
        if not missing:
            return
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise Unsupported(f"needs host packages {' '.join(missing)} (not installed; apt-get needs root)")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if (
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                env=env,
                capture_output=True,
            ).returncode
            != 0
        ):
            _run(["apt-get", "update", "-qq"], "apt-get update", env)
            _run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                f"apt-get install {' '.join(missing)}",
                env,
            )


def _dpkg_installed(package: str) -> bool:
    name = package.split("=")[0]
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True)
    return done.returncode == 0 and "install ok installed" in done.stdout


def _run(argv: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unsupported(f"{what} failed: {e}") from e
    if done.returncode != 0:
        raise Unsupported(f"{what} failed (exit {done.returncode}): {(done.stdout + done.stderr)[-1500:]}")
