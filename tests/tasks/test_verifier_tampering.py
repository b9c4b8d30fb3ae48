"""The verifier cannot be tampered with (issue #16), in real bubblewrap sandboxes.

Each test is one trick a harness could leave behind: a scripted "agent" (a harness that runs a bash
script in the sandbox, as an agent's shell tool would) plants it on a task it does not solve, and the
attempt, through the orchestrator's one pipeline (`run_task`), must score 0. Every one of these
scored 1.0 before the verifier got its clean context. The oracle still scores 1 on every format.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path
from typing import ClassVar

import pytest

from clawgym.harnesses.base import HarnessAdapter, Limits, ProtocolName, RunContext
from clawgym.harnesses.pseudo import Oracle
from clawgym.orchestrator.attempt import AttemptResult, run_task
from clawgym.sandbox import LocalSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox.local import LocalBackend
from clawgym.tasks.loader import load_task
from clawgym.tasks.model import Task
from clawgym.tasks.provision import PROVISION_DIR, Provisioner
from clawgym.tasks.verify import Verdict, verifier_env, verify

DATA = Path(__file__).parent / "data"
TB = DATA / "terminal-bench" / "csv-total"  # pytest verifier, workdir /app
TB_UNSOLVED = 1 / 3  # its third test only checks that the tests were copied to /tests
HARBOR_PYTEST = DATA / "harbor" / "json-config"  # pytest verifier with a provisioned package
HARBOR_FILE = DATA / "harbor" / "count-words"  # test.sh writes /logs/verifier/reward.txt
CLAW_SH = DATA / "clawgym" / "write-greeting"  # reward.sh, workdir inside HOME
CLAW_PY = DATA / "clawgym" / "sum-scores"  # check.py

DONE = "echo planted"  # the last line of every plant: the script ran to its end

# A conftest.py that turns every failed test into a pass.
FORCE_PASS = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome, report.longrepr = "passed", None
"""
# A `pytest` (module or executable) that prints csv-total's three tests as passed and exits 0.
FAKE_PYTEST = """import sys
for name in ("test_total_file_exists", "test_total_is_the_sum_of_amounts",
             "test_tests_were_copied_to_test_dir"):
    print(f"PASSED ../tests/test_outputs.py::{name}")
sys.exit(0)
"""
# Python that makes any script's last line a full reward.
REWARD_AT_EXIT = "import atexit; atexit.register(lambda: print('{\"reward\": 1.0}'))"


class Scripted(HarnessAdapter):
    """An "agent" that runs one bash script in the workspace and calls no model."""

    name: ClassVar[str] = "scripted"
    protocol: ClassVar[ProtocolName] = "none"
    default_limits: ClassVar[Limits] = Limits(timeout_s=60.0)

    def __init__(self, script: str) -> None:
        super().__init__()
        self.script = f"set -e\n{script}\n{DONE}\n"

    def command(self, instruction: str, ctx: RunContext) -> list[str]:
        return ["bash", "-c", self.script]


def local_backend(root: Path) -> LocalBackend:
    """A local bubblewrap backend that sees the provisioned packages (pytest, the tasks' pip steps)."""
    local = LocalSandboxConfig(
        root_dir=str(root / "sandboxes"), isolation="bwrap", ro_paths=[str(PROVISION_DIR)]
    )
    return LocalBackend(SandboxConfig(owner="tamper-test", local=local))


def attempt(adapter: HarnessAdapter, task: Task, root: Path) -> AttemptResult:
    """One attempt through the orchestrator's pipeline in a fresh local backend."""

    async def run() -> AttemptResult:
        backend = local_backend(root)
        try:
            provisioned = await asyncio.to_thread(Provisioner().for_task, task)
            return await run_task(adapter, task, backend, env=provisioned.env)
        finally:
            await backend.close()

    return asyncio.run(run())


def assert_defeated(result: AttemptResult, unsolved: float = 0.0) -> None:
    """The trick was planted (the script ran to its end) and the unsolved task scores what an
    untouched workspace scores: `unsolved`."""
    assert result.harness_exit_code == 0 and "planted" in result.harness_output, (
        f"the agent's script failed, so nothing was tested: {result.harness_output[-1500:]}"
    )
    assert result.verdict.reward == unsolved and not result.verdict.passed, (
        f"the planted trick decided the reward: {result.verdict}"
    )


def with_env(task: Task, **env: str) -> Task:
    """The task as if its image set these variables (a Dockerfile ENV)."""
    return dataclasses.replace(task, env={**task.env, **env})


# --- the oracle still passes ---------------------------------------------------------------------


@pytest.mark.parametrize("folder", [TB, HARBOR_PYTEST, HARBOR_FILE, CLAW_SH, CLAW_PY], ids=lambda p: p.name)
def test_the_oracle_still_scores_one_on_every_format(tmp_path, folder):
    result = attempt(Oracle(), load_task(folder), tmp_path)
    assert result.verdict.reward == 1.0 and result.verdict.passed, result.verdict


# --- tricks in the workspace ---------------------------------------------------------------------


def test_a_pytest_py_and_conftest_py_in_the_workdir_are_not_imported(tmp_path):
    script = (
        f"cat > /app/pytest.py <<'EOF'\n{FAKE_PYTEST}EOF\ncat > /app/conftest.py <<'EOF'\n{FORCE_PASS}EOF"
    )
    result = attempt(Scripted(script), load_task(TB), tmp_path)
    assert_defeated(result, TB_UNSOLVED)
    assert "1/3 tests passed" in result.verdict.detail, "the real tests ran, with the real pytest"


def test_a_fake_python3_bash_or_pytest_on_a_writable_path_dir_is_not_run(tmp_path):
    """The task's PATH names a workspace folder (and, by an empty entry, the cwd): neither is searched."""
    fake = f"#!/bin/sh\nexec /usr/bin/python3 -I -c '{FAKE_PYTEST}'\n"
    script = (
        "mkdir -p /app/bin\n"
        f"for f in /app/bin/python3 /app/bin/pytest /app/python3; do cat > $f <<'EOS'\n{fake}EOS\n"
        "chmod +x $f; done"
    )
    task = with_env(load_task(TB), PATH=":/app/bin:/usr/local/bin:/usr/bin:/bin")
    assert_defeated(attempt(Scripted(script), task, tmp_path), TB_UNSOLVED)

    bash = "#!/bin/sh\necho 1.0\n"
    workdir = load_task(CLAW_SH).workdir
    script = f"mkdir -p bin\ncat > bin/bash <<'EOS'\n{bash}EOS\nchmod +x bin/bash"
    task = with_env(load_task(CLAW_SH), PATH=f"{workdir}/bin:/usr/bin:/bin")
    assert_defeated(attempt(Scripted(script), task, tmp_path))


def test_a_sitecustomize_on_a_writable_pythonpath_dir_is_not_imported(tmp_path):
    script = f"mkdir -p /workspace/lib\ncat > /workspace/lib/sitecustomize.py <<'EOF'\n{REWARD_AT_EXIT}\nEOF"
    task = with_env(load_task(CLAW_PY), PYTHONPATH="/workspace/lib")
    assert_defeated(attempt(Scripted(script), task, tmp_path))


def test_the_verifier_env_keeps_no_writable_folder_of_the_task_but_the_orchestrators_own():
    """The task's PATH/PYTHONPATH (its image's ENV) lose writable, relative and empty entries; the
    orchestrator's provisioned folders stay, even under HOME (read-only binds there)."""
    task = with_env(
        load_task(TB), PATH=":/app/bin:bin:/tests:/usr/bin", PYTHONPATH="/app/lib:/tmp/x:/opt/lib"
    )
    spec = SandboxSpec(workdir=task.workdir, mounts=task.sandbox_mounts(), home="/root")
    env = verifier_env(task, spec)
    assert env["PATH"] == "/tests:/usr/bin" and env["PYTHONPATH"] == "/opt/lib", env
    provisioned = {"PYTHONPATH": f"{PROVISION_DIR}/pip-0"}
    assert verifier_env(task, spec, provisioned)["PYTHONPATH"] == provisioned["PYTHONPATH"]
    assert "PATH" not in verifier_env(with_env(task, PATH="/app/bin:/root/bin"), spec), (
        "nothing left: the backend's default (the system's) applies"
    )


# --- tricks in HOME ------------------------------------------------------------------------------

USER_SITE = 'site=$(python3 -m site --user-site)\nmkdir -p "$site"\n'


def test_a_usercustomize_in_the_user_site_is_not_imported(tmp_path):
    script = USER_SITE + f"cat > \"$site/usercustomize.py\" <<'EOF'\n{REWARD_AT_EXIT}\nEOF"
    assert_defeated(attempt(Scripted(script), load_task(CLAW_PY), tmp_path))


def test_a_pth_file_in_the_user_site_is_not_run(tmp_path):
    script = USER_SITE + f"cat > \"$site/zz-reward.pth\" <<'EOF'\n{REWARD_AT_EXIT}\nEOF"
    assert_defeated(attempt(Scripted(script), load_task(CLAW_PY), tmp_path))


def test_shell_rc_files_in_home_do_not_reach_a_verifier_that_sources_them(tmp_path):
    """A test.sh that sources ~/.bashrc (for an image's conda or nvm) gets a fresh, empty HOME."""
    folder = tmp_path / "rc-task"
    shutil.copytree(HARBOR_FILE, folder)
    test_sh = (folder / "tests" / "test.sh").read_text()
    (folder / "tests" / "test.sh").write_text(
        test_sh.replace(
            "mkdir -p", '. "$HOME/.bashrc" 2>/dev/null; . "$HOME/.profile" 2>/dev/null\nmkdir -p', 1
        )
    )
    rc = "cat() { echo 9; }\nalias cat='echo 9'\nexport PATH=$HOME/bin:$PATH\n"
    script = f"for f in ~/.bashrc ~/.profile ~/.bash_profile; do cat > $f <<'EOS'\n{rc}EOS\ndone"
    assert_defeated(attempt(Scripted(script), load_task(folder), tmp_path))


# --- tricks in the verifier's own directories ----------------------------------------------------


def test_a_conftest_py_in_a_tests_dir_made_read_only_is_gone(tmp_path):
    script = (
        f"cat > /tests/conftest.py <<'EOF'\n{FORCE_PASS}EOF\nchmod 444 /tests/conftest.py\nchmod 555 /tests"
    )
    result = attempt(Scripted(script), load_task(TB), tmp_path)
    assert_defeated(result, TB_UNSOLVED)
    assert "1/3 tests passed" in result.verdict.detail, result.verdict


def test_symlinks_in_or_for_tests_are_gone(tmp_path):
    """/tests is a mount point here, so it cannot be replaced; links planted inside it are removed."""
    script = (
        f"mkdir -p /app/fake\ncat > /app/fake/conftest.py <<'EOF'\n{FORCE_PASS}EOF\n"
        "rm -rf /tests 2>/dev/null || true\n"
        "ln -s /app/fake /tests 2>/dev/null || true\n"
        "ln -s /app/fake/conftest.py /tests/conftest.py\n"
        "ln -s /app/fake /tests/fake\n"
        "chmod 555 /tests"
    )
    result = attempt(Scripted(script), load_task(TB), tmp_path)
    assert_defeated(result, TB_UNSOLVED)
    assert "1/3 tests passed" in result.verdict.detail, result.verdict


def test_a_reward_file_planted_in_a_read_only_logs_dir_is_gone(tmp_path):
    script = (
        "mkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt\n"
        "chmod 444 /logs/verifier/reward.txt\nchmod 555 /logs/verifier /logs"
    )
    assert_defeated(attempt(Scripted(script), load_task(HARBOR_FILE), tmp_path))


# --- verifiers that recomputed the answer from files the agent could edit -------------------------


def test_editing_the_input_does_not_change_the_expected_answer(tmp_path):
    """The agent rewrites the input and answers for it: a wrong answer for the task as shipped, so
    only the partial credit a wrong answer earns (a total that is an integer; a greeting that exists)."""
    script = "printf '0\\n' > scores.txt\necho 0 > total.txt"
    result = attempt(Scripted(script), load_task(CLAW_PY), tmp_path)
    assert_defeated(result, unsolved=2 / 3)
    assert result.verdict.scores["correct"] == 0.0, result.verdict
    script = "echo Eve > name.txt\necho 'Hello, Eve!' > greeting.txt"
    assert_defeated(attempt(Scripted(script), load_task(CLAW_SH), tmp_path), unsolved=0.5)


# --- where a reset is defeated, the attempt fails closed -----------------------------------------


class UnresettableSandbox:
    """A real local sandbox whose `reset_dir` leaves everything as it was: a backend whose reset the
    harness could defeat (on a pod, one uid and processes that outlive their exec). Nothing here
    defeats the local reset, so this stand-in is the only way to reach the check behind it."""

    def __init__(self, sandbox) -> None:
        self._sandbox = sandbox

    def __getattr__(self, name: str):
        return getattr(self._sandbox, name)

    async def reset_dir(self, path: str) -> None:
        return None


def verify_unreset(task: Task, script: str, root: Path) -> Verdict:
    """Plants `script` as the agent would, then verifies through a reset that does nothing."""

    async def run() -> Verdict:
        backend = local_backend(root)
        try:
            spec = SandboxSpec(workdir=task.workdir, mounts=task.sandbox_mounts(), home="/root")
            sandbox = await backend.create(spec)
            planted = await sandbox.exec(["bash", "-c", Scripted(script).script])
            assert planted.ok and b"planted" in planted.stdout, planted
            provisioned = await asyncio.to_thread(Provisioner().for_task, task)
            return await verify(task, UnresettableSandbox(sandbox), env=provisioned.env)
        finally:
            await backend.close()

    return asyncio.run(run())


def test_tests_that_kept_the_agents_conftest_fail_closed(tmp_path):
    script = f"cat > /tests/conftest.py <<'EOF'\n{FORCE_PASS}EOF\nchmod 555 /tests"
    verdict = verify_unreset(load_task(TB), script, tmp_path)
    assert verdict.reward == 0.0 and not verdict.passed, verdict
    assert "tests/conftest.py" in verdict.detail and "fails closed" in verdict.detail, verdict.detail


def test_a_reward_file_there_before_the_verifier_fails_closed(tmp_path):
    verdict = verify_unreset(
        load_task(HARBOR_FILE), "mkdir -p /logs/verifier\necho 1 > /logs/verifier/reward.txt", tmp_path
    )
    assert verdict.reward == 0.0 and not verdict.passed, verdict
    assert "reward.txt exists before the verifier ran" in verdict.detail, verdict.detail
