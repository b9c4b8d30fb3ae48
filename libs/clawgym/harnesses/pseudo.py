"""The pseudo-harnesses that validate task suites: `oracle` runs the task's reference solution,
`nop` does nothing. Neither talks to a model; a sound task passes with the oracle and fails with nop.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from clawgym.errors import FailedPrecondition
from clawgym.harnesses.base import HarnessAdapter, Launch, Limits, ProtocolName, RunContext

if TYPE_CHECKING:
    from clawgym.tasks.model import Task


class Nop(HarnessAdapter):
    name: ClassVar[str] = "nop"
    protocol: ClassVar[ProtocolName] = "none"
    default_limits: ClassVar[Limits] = Limits(timeout_s=60.0)

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return ["true"]


class Oracle(HarnessAdapter):
    name: ClassVar[str] = "oracle"
    protocol: ClassVar[ProtocolName] = "none"

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        raise FailedPrecondition("the oracle runs a task's solution: call launch() with the task")

    def launch(self, instruction: str, ctx: RunContext, task: Task | None = None) -> Launch:
        """`bash <solution script>` in the workdir, with the solution's files put under /solution."""
        if task is None or not task.has_solution:
            raise FailedPrecondition(
                f"task {task.id if task else '?'} has no reference solution for the oracle"
            )
        files: dict[str, bytes] = {}
        for item in task.solution:
            sources = (
                [item.source]
                if item.source.is_file()
                else sorted(p for p in item.source.rglob("*") if p.is_file())
            )
            for path in sources:
                rel = "" if path == item.source else "/" + path.relative_to(item.source).as_posix()
                files[item.target + rel] = Path(path).read_bytes()
        return Launch(
            argv=("bash", task.solution_script),
            env=self.env(ctx),
            cwd=ctx.workdir,
            timeout_s=max(self.limits.timeout_s, task.agent_timeout_s),
            files=files,
        )
