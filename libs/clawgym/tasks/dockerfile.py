"""Reads a task's Dockerfile into what the local backend can do instead of building the image.

A Dockerfile that only picks a stock base image, sets WORKDIR/ENV, copies files from its context
and installs packages becomes setup steps (provisioned on the host), a workdir, env and files.
Anything else (a service, a custom base image, a build step) makes the task unsupported locally,
with the reason naming the line. This module only parses; it runs nothing.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clawgym.tasks.model import SetupStep, TaskFile
from clawgym.tasks.provision import packages_problem

# Base images whose userland the host's read-only system stands in for (Debian-like + Python).
STOCK_IMAGES = re.compile(
    r"^(docker\.io/)?(library/)?(ubuntu|debian|python|buildpack-deps)(:|@|$)"
    r"|^ghcr\.io/laude-institute/t-bench/(ubuntu|python)[^/]*(:|@|$)"
)
_APT_FLAGS_WITH_VALUE = {"-o", "-t", "--target-release"}
_HARMLESS = (
    ("apt-get", "update"),
    ("apt", "update"),
    ("apt-get", "clean"),
    ("apt", "clean"),
    ("apt-get", "autoremove"),
    ("true",),
    ("set",),
)


@dataclass
class DockerPlan:
    """The local equivalent of one Dockerfile."""

    workdir: str = "/app"
    env: dict[str, str] = field(default_factory=dict)
    setup: list[SetupStep] = field(default_factory=list)
    files: list[TaskFile] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    unsupported: str | None = None

    def refuse(self, reason: str) -> None:
        if self.unsupported is None:
            self.unsupported = reason

    def task_fields(self) -> dict[str, Any]:
        """The `Task` fields this plan decides (the environment, not the instruction or verifier)."""
        return {
            "workdir": self.workdir,
            "mounts": tuple(self.mounts),
            "files": tuple(self.files),
            "setup": tuple(self.setup),
            "env": dict(self.env),
            "unsupported": self.unsupported,
        }


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, with line continuations joined and comments dropped."""
    joined, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        joined.append(current + line)
        current = ""
    if current.strip():
        joined.append(current)
    out = []
    for item in joined:
        keyword, _, args = item.strip().partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _packages(words: list[str], skip_with_value: set[str] = frozenset()) -> list[str]:
    packages, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in skip_with_value:
            skip = True
        elif not word.startswith("-"):
            packages.append(word)
    return packages


def _run_step(command: str, plan: DockerPlan) -> None:
    """Classifies one shell command of a RUN line; anything not a package install refuses the task."""
    try:
        words = shlex.split(command)
    except ValueError:
        plan.refuse(f"Dockerfile RUN step cannot be parsed: {command!r}")
        return
    if not words:
        return
    if words[0] in ("sudo", "env") or "=" in words[0]:
        words = [w for w in words[1:] if "=" not in w] if words[0] != "sudo" else words[1:]
    if not words or tuple(words[:2]) in _HARMLESS or tuple(words[:1]) in _HARMLESS:
        return
    if words[0] in ("apt-get", "apt") and len(words) > 1 and words[1] == "install":
        _setup("apt", _packages(words[2:], _APT_FLAGS_WITH_VALUE), plan)
    elif words[0] in ("pip", "pip3") and words[1:2] == ["install"]:
        _pip(words[2:], command, plan)
    elif words[:4] in (["python", "-m", "pip", "install"], ["python3", "-m", "pip", "install"]):
        _pip(words[4:], command, plan)
    elif words[:3] == ["uv", "pip", "install"]:
        _pip([w for w in words[3:] if w != "--system"], command, plan)
    elif words[:3] in (["npm", "install", "-g"], ["npm", "i", "-g"]):
        _setup("npm", _packages(words[3:]), plan)
    elif words[0] == "rm" and all(
        w.startswith(("-", "/var/lib/apt/lists", "/var/cache", "/tmp")) for w in words[1:]
    ):
        return
    elif words[0] == "mkdir":
        for path in _packages(words[1:]):
            _writable(posixpath.join(plan.workdir, path), plan, f"RUN mkdir {path}")
    else:
        plan.refuse(f"Dockerfile RUN step is not a package install: {command!r}")


def _pip(args: list[str], command: str, plan: DockerPlan) -> None:
    if any(a in ("-r", "--requirement", "-e", "--editable", ".") for a in args):
        plan.refuse(f"Dockerfile pip step installs from local files: {command!r}")
        return
    _setup("pip", _packages(args, {"-i", "--index-url", "--extra-index-url", "-c"}), plan)


def _setup(manager: str, packages: list[str], plan: DockerPlan) -> None:
    """A setup step of registry packages; a path, URL or archive refuses the task (it would install,
    and so run, the suite's own code on the host that provisions it)."""
    if problem := packages_problem(manager, packages):
        plan.refuse(f"Dockerfile {problem}")
    else:
        plan.setup.append(SetupStep(manager, tuple(packages)))


def _writable(path: str, plan: DockerPlan, what: str) -> None:
    """Files may only land in the workdir or a mount of their own; system paths are read-only."""
    path = posixpath.normpath(path)
    if path == plan.workdir or path.startswith(plan.workdir.rstrip("/") + "/"):
        return
    top = "/" + path.strip("/").split("/")[0]
    if top in (
        "/usr",
        "/etc",
        "/bin",
        "/sbin",
        "/lib",
        "/lib64",
        "/var",
        "/opt",
        "/root",
        "/home",
        "/tmp",
        "/",
    ):
        plan.refuse(f"Dockerfile {what} writes to the read-only system path {path}")
    elif top not in plan.mounts:
        plan.mounts.append(top)


def plan_dockerfile(path: Path, context: Path | None = None) -> DockerPlan:
    """What the local backend does instead of building the image at `path` (context: its folder)."""
    context = context or path.parent
    plan = DockerPlan()
    for keyword, args in instructions(path.read_text()):
        if keyword == "FROM":
            image = args.split()[0] if args else ""
            if not STOCK_IMAGES.match(image):
                plan.refuse(f"needs its own base image {image!r}")
        elif keyword == "WORKDIR":
            plan.workdir = posixpath.normpath(posixpath.join(plan.workdir, args.strip("\"'")))
        elif keyword == "ENV":
            _env(args, plan)
        elif keyword in ("COPY", "ADD"):
            _copy(args, context, plan, keyword)
        elif keyword == "RUN":
            body = args[1:-1] if args.startswith("[") else args
            for command in re.split(r"&&|\|\||;", body):
                _run_step(command.strip(), plan)
        elif keyword in ("EXPOSE", "HEALTHCHECK", "VOLUME"):
            plan.refuse(f"Dockerfile {keyword} {args}: the task needs a service")
        elif keyword in ("CMD", "ENTRYPOINT", "LABEL", "ARG", "SHELL", "USER", "MAINTAINER", "STOPSIGNAL"):
            continue
        else:
            plan.refuse(f"Dockerfile instruction {keyword} is not supported")
    return plan


def _env(args: str, plan: DockerPlan) -> None:
    words = shlex.split(args)
    if len(words) >= 2 and "=" not in words[0]:
        plan.env[words[0]] = " ".join(words[1:])
        return
    for word in words:
        key, _, value = word.partition("=")
        plan.env[key] = value


def _copy(args: str, context: Path, plan: DockerPlan, keyword: str) -> None:
    words = [w for w in shlex.split(args) if not w.startswith("--")]
    if len(words) < 2:
        plan.refuse(f"Dockerfile {keyword} {args}: needs a source and a destination")
        return
    *sources, dest = words
    dest = posixpath.normpath(posixpath.join(plan.workdir, dest))
    for source in sources:
        host = (context / source).resolve()
        if (
            source.startswith(("http://", "https://"))
            or not host.exists()
            or context.resolve() not in (host, *host.parents)
        ):
            plan.refuse(f"Dockerfile {keyword} {source}: not a file in the task's build context")
            return
        target = dest
        if host.is_file() and (words[-1].endswith("/") or len(sources) > 1 or dest == plan.workdir):
            target = posixpath.join(dest, host.name)
        if host == context.resolve():
            target = dest
        _writable(target, plan, f"{keyword} {source}")
        plan.files.append(TaskFile(host, target))
