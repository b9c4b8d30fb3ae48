"""The task model: one `Task` whatever format it was loaded from, and how its reward is computed.

A task is an instruction, files to put into the sandbox before the harness starts, the sandbox
paths it expects to be writable, and a `VerifierSpec` whose files go in only after the harness
exits. Loaders (`clawgym_format`, `terminal_bench`, `harbor`) build it; `verify` runs it. This
module does no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from clawgym.errors import InvalidArgument
from clawgym.sandbox.environment import loader_variables

if TYPE_CHECKING:
    from clawgym.tasks.rubric import Rubric

# Sandbox paths shared by every format. Terminal-Bench and Harbor scripts name them literally.
TESTS_DIR = "/tests"  # verifier files, copied in only after the harness exits
SOLUTION_DIR = "/solution"  # the reference solution, copied in only for the oracle
LOGS_DIR = "/logs"  # Harbor: test.sh writes /logs/verifier/reward.txt
DEFAULT_WORKDIR = "/workspace"  # where a task without a stated directory is worked on

VerifierKind = Literal["reward_sh", "check_py", "pytest", "reward_file"]
Split = Literal["train", "validation", "test", ""]


class TaskFormatError(InvalidArgument):
    """A task directory is malformed: a required file is missing or a field has the wrong type."""


@dataclass(frozen=True)
class TaskFile:
    """A host file or directory and the sandbox path it is copied to (a directory's contents merge)."""

    source: Path
    target: str


@dataclass(frozen=True)
class SetupStep:
    """Packages a task's image would install; provisioned on the host instead (`tasks.provision`)."""

    manager: Literal["apt", "pip", "npm"]
    packages: tuple[str, ...]


@dataclass(frozen=True)
class TaskImage:
    """The task's own image, for backends that run one (`SandboxBackend.task_images`): built from
    `dockerfile` with the `context` folder, or the prebuilt `name` (Harbor's `docker_image`)."""

    dockerfile: Path | None = None
    context: Path | None = None
    name: str = ""
    # why even a backend that runs the image cannot run the task (services besides it)
    unsupported: str | None = None


@dataclass(frozen=True)
class VerifierSpec:
    """How a task's reward is computed once the harness has exited.

    - `reward_sh`: `bash TESTS_DIR/<script> WORKDIR`; the last stdout line is the reward.
    - `check_py`: `python3 TESTS_DIR/<script> WORKDIR` prints a JSON dict of sub-scores; the reward
      is its `reward`/`score`/`total` entry if present, else the mean of the numeric values.
    - `pytest`: run the test files with a pytest the sandbox already has; reward = passed/total,
      so `passed` (reward >= 1.0) means every test passed.
    - `reward_file`: `bash TESTS_DIR/<script>`; the script writes the reward to `reward_file`.
    """

    kind: VerifierKind
    files: tuple[TaskFile, ...]  # copied in after the harness exits
    script: str = ""  # sandbox path of the script to run
    test_files: tuple[str, ...] = ()  # pytest: sandbox paths of the test files
    reward_file: str = ""  # reward_file: where the script writes the reward
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 600.0
    threshold: float = 1.0  # passed = reward >= threshold

    def passed(self, reward: float) -> bool:
        return reward >= self.threshold


@dataclass(frozen=True)
class Task:
    """One task, in the sandbox's terms. `unsupported` names why the local backend cannot run it;
    `image` (if any) is what a backend that runs task images runs instead (`in_own_image`)."""

    id: str
    instruction: str
    format: str  # "clawgym" | "terminal-bench" | "harbor"
    source_dir: Path
    verifier: VerifierSpec
    workdir: str = DEFAULT_WORKDIR  # the harness starts here; the workspace is mounted here
    mounts: tuple[str, ...] = ()  # other writable sandbox paths the task names
    files: tuple[TaskFile, ...] = ()  # put in before the harness starts
    solution: tuple[TaskFile, ...] = ()  # the reference solution, put under SOLUTION_DIR
    solution_script: str = ""  # its entry point (sandbox path); "" = no solution
    setup: tuple[SetupStep, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    unsupported: str | None = None
    split: Split = ""
    agent_timeout_s: float = 900.0
    metadata: Mapping[str, object] = field(default_factory=dict)
    # hybrid tasks: the part of the reward an LLM judge scores (`tasks.rubric`, `clawgym.judge`)
    rubric: Rubric | None = None
    image: TaskImage | None = None

    def __post_init__(self) -> None:
        # A suite is third-party input: no variable of its may make a process run named code.
        if found := loader_variables({**self.env, **self.verifier.env}):
            raise TaskFormatError(
                f"task {self.id}: its environment sets {', '.join(found)}, which makes processes load "
                "or run code named by the value; such variables are refused in task environments"
            )

    @property
    def has_solution(self) -> bool:
        return bool(self.solution_script)

    def unsupported_by(self, task_images: bool) -> str | None:
        """Why a backend (that runs task images, or not) cannot run this task; None if it can."""
        if task_images and self.image is not None:
            return self.image.unsupported
        return self.unsupported

    def in_own_image(self) -> Task:
        """The task as its own image runs it: the image already holds what the Dockerfile copies,
        installs and sets (files, setup steps, ENV, which may expand `$PATH`), so none is repeated."""
        if self.image is None:
            return self
        return dataclasses.replace(self, files=(), setup=(), env={}, unsupported=self.image.unsupported)

    def sandbox_mounts(self) -> tuple[str, ...]:
        """Every writable path besides the workdir: the task's own plus the verifier's and oracle's."""
        wanted = [*self.mounts, TESTS_DIR, SOLUTION_DIR]
        if self.verifier.kind == "reward_file":
            wanted.append(LOGS_DIR)
        seen: list[str] = []
        for path in wanted:
            if path != self.workdir and path not in seen:
                seen.append(path)
        return tuple(seen)
