"""Per-sandbox caps of the local backend (issue #16): memory and processes on the sandbox's cgroup,
disk on the tmpfs that holds its storage.

Before, memory was RLIMIT_DATA per process (several processes each under it could together take
any amount) and disk was not capped at all. The caps need root here (cgroups, tmpfs mounts): the
backend is built with caps="required", so on root a missing cap fails the test rather than skips.
"""

import asyncio
import os

import pytest

from clawgym.sandbox import Resources, SandboxSpec
from tests.sandbox.scripts import FORK_BOMB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and tmpfs mounts need root here")

# Four processes of ~90 MB each (80 MB written, so really resident, plus Python itself): each is
# far under the 200 MB per-process RLIMIT_DATA, together they are far over the 200 MB cap.
HOGS = """\
import subprocess, sys
hog = "s = 'x' * (80 << 20); import time; time.sleep(30)"
procs = [subprocess.Popen([sys.executable, "-c", hog]) for _ in range(4)]
print([p.wait() for p in procs])
"""


def test_processes_that_together_exceed_the_memory_cap_stop_the_sandbox(make_local):
    backend = make_local(caps="required")

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(memory_mb=200)))
        try:
            one = await sandbox.exec(["python3", "-c", "s = 'x' * (80 << 20); print('one fits')"])
            together = await sandbox.exec(["python3", "-c", HOGS], timeout_s=120)
            after = await sandbox.exec(["echo", "alive"])
            return one, together, after
        finally:
            await sandbox.destroy()

    one, together, after = asyncio.run(scenario())
    assert one.stdout == b"one fits\n", f"one such process alone is fine: {one}"
    # without the cap the hogs sleep 30 s and exit 0; with it the whole exec is stopped at once
    assert together.exit_code == 137 and not together.timed_out, together
    assert b"memory cap of 200 MiB" in together.stderr, together.stderr[-500:]
    assert after.stdout == b"alive\n", "the sandbox works again once the exec is stopped"


def test_a_fork_bomb_is_capped_by_the_sandbox_cgroup(make_local):
    backend = make_local(caps="required")

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(processes=24)))
        try:
            bombed = await sandbox.exec(["python3", "-c", FORK_BOMB], timeout_s=60)
            shell_bomb = await sandbox.exec("f() { f | f & }; f; sleep 2", timeout_s=8)
            refused = (sandbox.cgroup.dirs[-1] / "pids.events").read_text()
            after = await sandbox.exec("echo alive")
            return bombed, shell_bomb, refused, after
        finally:
            await sandbox.destroy()

    bombed, shell_bomb, refused, after = asyncio.run(scenario())
    started, errno = bombed.stdout.split()
    assert int(started) < 24 and errno == b"11", f"at most the cap, then EAGAIN: {bombed}"
    # the cgroup, which counts every process of the sandbox whatever its uid, is what said no
    assert int(refused.split()[1]) > 0, f"pids.events: {refused!r}"
    assert shell_bomb.duration_s < 60, "a shell fork bomb must end by the wall-clock limit at the latest"
    assert after.stdout == b"alive\n", "the sandbox must work again after the bomb"


def test_writing_more_than_the_disk_cap_fails(make_local):
    backend = make_local(caps="required")
    write = "dd if=/dev/zero of={path} bs=1M count={mb} 2>&1 && echo written"

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(disk_mb=32)))
        try:
            fits = await sandbox.exec(write.format(path="/workspace/a", mb=20))
            # the cap holds for the sandbox's writable dirs together: /tmp is on the same budget
            over = await sandbox.exec(write.format(path="/tmp/b", mb=20))
            workspace = await sandbox.exec("df -m /workspace | tail -1")
            return fits, over, workspace
        finally:
            await sandbox.destroy()

    fits, over, workspace = asyncio.run(scenario())
    assert fits.stdout.endswith(b"written\n"), f"20 MB under a 32 MB cap must fit: {fits}"
    assert over.exit_code != 0 and b"No space left on device" in over.stdout, over
    assert workspace.stdout.split()[1] == b"32", f"the workspace's size is the cap: {workspace.stdout!r}"
