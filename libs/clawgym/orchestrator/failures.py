"""Infrastructure failures: which ones exist, which are retried, and how exceptions map onto them.

A rollout ends in one of two ways. A *task outcome*: the harness ran (whatever its exit code or a
timeout) and the verifier gave a reward, maybe 0. An *infrastructure failure*: something around the
harness broke, so the run says nothing about the policy; it is never rewarded, and the transient
kinds are retried with a fresh rollout. This module only classifies; `runner` acts on it.
"""

from __future__ import annotations

from clawgym.errors import ClawgymError, FailedPrecondition, InvalidArgument, Unavailable
from clawgym.harnesses.install import InstallFailed
from clawgym.sandbox.interface import SandboxFailed
from clawgym.tasks.provision import Unsupported

SANDBOX = "sandbox"  # the sandbox could not be created or broke (pod never started, bwrap failed, …)
HARNESS_START = "harness_start"  # the harness's command could not be executed (exit 126/127)
# the proxy did not answer GET /healthz before a model-calling harness started, or the harness
# ended without one call recorded (it never reached the policy, so its reward means nothing)
PROXY = "proxy"
INSTALL = "install"  # the harness CLI is not installed and could not be installed
UNSUPPORTED = "unsupported"  # the task or its sandbox spec cannot run on this backend
INTERNAL = "internal"  # a bug: an unexpected exception (logged with its traceback)
# a hybrid task's LLM judge failed after its own retries (unreachable, timed out, an HTTP error, or
# an answer without a score for every rule): the rubric part is unknown, so the rollout has no
# reward. Not retried (the harness would run again for the same judge); the judgment is recorded.
JUDGE = "judge"

KINDS = (SANDBOX, HARNESS_START, PROXY, INSTALL, UNSUPPORTED, INTERNAL, JUDGE)
RETRIED = frozenset({SANDBOX, HARNESS_START, PROXY, INSTALL})  # may pass on a fresh attempt
# exit codes of a shell (or setpriv / kubectl exec) whose command could not be executed at all
NOT_EXECUTED = (126, 127)


class InfraFailure(Exception):
    """Raised inside an attempt: the rollout failed for a reason outside the harness and the task."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind, self.message = kind, message

    @property
    def retried(self) -> bool:
        return self.kind in RETRIED


class JudgeFailed(InfraFailure):
    """The judge of a hybrid task's rubric failed; carries what it was asked and answered."""

    def __init__(self, message: str, outcome: object, code_score: float) -> None:
        super().__init__(JUDGE, message)
        self.outcome, self.code_score = outcome, code_score


def classify(e: BaseException, stage: str) -> InfraFailure:
    """The infrastructure failure an exception raised at `stage` (a failure kind) stands for."""
    if isinstance(e, InfraFailure):
        return e
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, InstallFailed):
        return InfraFailure(INSTALL, text)
    if isinstance(e, Unsupported):
        return InfraFailure(UNSUPPORTED, text)
    if isinstance(e, SandboxFailed | Unavailable | OSError | TimeoutError):
        return InfraFailure(SANDBOX if stage == SANDBOX else stage, text)
    if isinstance(e, InvalidArgument | FailedPrecondition):
        # a spec the backend refuses (a mount it cannot make, mounts without bubblewrap): retrying
        # gives the same answer
        return InfraFailure(UNSUPPORTED, text)
    if isinstance(e, ClawgymError):
        return InfraFailure(stage, text)
    return InfraFailure(INTERNAL, text)
