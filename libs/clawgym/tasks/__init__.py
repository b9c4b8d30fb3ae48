"""Tasks: one `Task` model, loaders for the ClawGym, Terminal-Bench 1 and Harbor formats, the
verifier that computes a reward in a sandbox, host provisioning of setup steps, suites (the bundled
mini suite and imported ones) and the oracle/nop check. Running harnesses is `clawgym.harnesses`.

>>> tasks = load_tasks(mini_suite_dir(), split="train")   # the bundled suite, generated on first use
>>> task = load_task("path/to/task")                       # any known format, detected
"""

from clawgym.tasks.loader import detect_format, load_task, load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir
from clawgym.tasks.model import Task, TaskFile, TaskFormatError, VerifierSpec
from clawgym.tasks.verify import Verdict, verify

__all__ = [
    "Task",
    "TaskFile",
    "TaskFormatError",
    "Verdict",
    "VerifierSpec",
    "detect_format",
    "load_task",
    "load_tasks",
    "mini_suite_dir",
    "verify",
]
