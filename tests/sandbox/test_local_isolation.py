"""The local backend's isolation: filesystem, other sandboxes, identity, timeouts, rlimits (the
network: test_local_network; per-sandbox caps: test_local_caps).

Every test runs real bubblewrap (`isolation="bwrap"` fails rather than falls back) as the user
the tests run as; the uid assertions need root, which is how CI runs.
"""

import asyncio
import os
import time
from pathlib import Path

import pytest

from clawgym.sandbox import Resources, SandboxSpec
from tests.sandbox.scripts import FORK_BOMB

AS_ROOT = os.geteuid() == 0


def test_a_task_cannot_write_outside_its_writable_directories(make_local, tmp_path: Path):
    """The system is read-only and absent host paths stay absent: writes fail and leave no trace."""
    backend = make_local()
    targets = ["/usr/clawgym-x", "/etc/clawgym-x", "/opt/clawgym-x", "/var/clawgym-x", "/clawgym-x"]

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            script = "; ".join(f"echo pwned > {t} 2>/dev/null && echo WROTE {t}" for t in targets)
            result = await sandbox.exec(script + "; echo ok > /workspace/mine")
            mine = await sandbox.get_file("/workspace/mine")
            return result, mine
        finally:
            await sandbox.destroy()

    result, mine = asyncio.run(scenario())
    assert b"WROTE" not in result.stdout, f"a write outside the workspace succeeded: {result.stdout!r}"
    for target in targets:
        assert not os.path.exists(target), f"{target} appeared on the host"
    assert mine == b"ok\n", "the workspace itself must stay writable"


def test_a_sandbox_cannot_read_another_rollouts_workspace_or_the_hosts_home(make_local):
    """Neither by its sandbox path, nor by the other's host storage path, nor via /root or /tmp."""
    backend = make_local()
    secret = "s3cret-" + os.urandom(8).hex()
    marker = Path("/tmp") / f"clawgym-host-marker-{os.getpid()}"
    home_marker = Path.home() / f".clawgym-host-marker-{os.getpid()}"
    for path in (marker, home_marker):
        path.write_text(secret)

    async def scenario():
        victim = await backend.create(SandboxSpec(mounts=["/app"]))
        thief = await backend.create(SandboxSpec(mounts=["/app"]))
        try:
            await victim.put_file("/workspace/secret.txt", secret.encode())
            await victim.put_file("/app/secret.txt", secret.encode())
            host_copy = victim.storage / "fs" / "work" / "secret.txt"
            assert host_copy.read_text() == secret, "the victim's file must exist on the host for the test"
            script = (
                f"cat {host_copy} /workspace/secret.txt /app/secret.txt {marker} {home_marker} 2>&1; "
                f"ls -a {backend.root} /root /root/.cache /tmp 2>&1; "
                "grep -rs s3cret- /workspace /app /root /tmp /home /run /var/tmp 2>&1; true"
            )
            return await thief.exec(script)
        finally:
            await victim.destroy()
            await thief.destroy()

    try:
        result = asyncio.run(scenario())
    finally:
        marker.unlink()
        home_marker.unlink()
    assert secret.encode() not in result.stdout, (
        f"the other sandbox's secret (or a host file) leaked: {result.stdout!r}"
    )
    assert b"k8s-local" not in result.stdout, (
        f"the host's ~/.cache is visible beyond ro_paths: {result.stdout!r}"
    )


def test_tmp_is_private_to_a_sandbox_and_persists_between_its_execs(make_local):
    backend = make_local()

    async def scenario():
        a = await backend.create(SandboxSpec())
        b = await backend.create(SandboxSpec())
        try:
            await a.exec("echo a-was-here > /tmp/note")
            again = await a.exec("cat /tmp/note")
            other = await b.exec("ls -A /tmp; cat /tmp/note")
            return again, other
        finally:
            await a.destroy()
            await b.destroy()

    again, other = asyncio.run(scenario())
    assert again.stdout == b"a-was-here\n", "a sandbox's /tmp must keep its files between execs"
    assert b"a-was-here" not in other.stdout and other.exit_code != 0, "another sandbox must not see them"


@pytest.mark.skipif(not AS_ROOT, reason="per-sandbox uids need root")
def test_commands_run_as_a_per_sandbox_unprivileged_uid_without_capabilities(make_local):
    backend = make_local()

    async def scenario():
        sandboxes = [await backend.create(SandboxSpec()) for _ in range(2)]
        try:
            return sandboxes, [
                await s.exec("id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status; whoami")
                for s in sandboxes
            ]
        finally:
            for s in sandboxes:
                await s.destroy()

    sandboxes, results = asyncio.run(scenario())
    uids = [int(r.stdout.split()[0]) for r in results]
    assert uids == [s.uid for s in sandboxes], f"commands must run as the sandbox's uid: {uids}"
    assert len(set(uids)) == 2 and 0 not in uids, f"each sandbox needs its own non-root uid: {uids}"
    for r in results:
        text = r.stdout.decode()
        assert "CapEff:\t0000000000000000" in text, f"the sandbox must hold no capabilities: {text}"
        assert "NoNewPrivs:\t1" in text, f"setuid binaries must not raise privileges: {text}"
        assert text.strip().endswith("sandbox"), f"the uid needs a passwd entry (node's userInfo): {text}"


def test_the_host_environment_does_not_leak_but_spec_and_exec_env_apply(make_local, monkeypatch):
    monkeypatch.setenv("CLAWGYM_HOST_ONLY", "leaky")
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(env={"A": "spec", "B": "spec"}))
        try:
            return await sandbox.exec("env", env={"B": "exec"})
        finally:
            await sandbox.destroy()

    env = dict(
        line.split("=", 1) for line in asyncio.run(scenario()).stdout.decode().splitlines() if "=" in line
    )
    assert "CLAWGYM_HOST_ONLY" not in env, "the orchestrator's environment must not reach the task"
    assert (env.get("A"), env.get("B")) == ("spec", "exec"), f"spec env, overridden by exec env: {env}"
    assert env.get("HOME") == "/root", f"HOME must be the spec's home: {env.get('HOME')}"


def _pids_running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


def test_the_timeout_kills_grandchildren_even_when_they_leave_the_session(make_local):
    """A daemonised grandchild (setsid + background) is gone after the timeout, and timed_out is set."""
    backend = make_local()
    marker = str(900_000 + os.getpid() % 99_999)  # a distinctive `sleep` argument to find the process by

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            run = asyncio.ensure_future(
                sandbox.exec(f"setsid sh -c 'sleep {marker} & sleep {marker}' & sleep 600", timeout_s=3)
            )
            seen = []
            for _ in range(50):
                await asyncio.sleep(0.1)
                seen = _pids_running(f"sleep {marker}")
                if len(seen) >= 2:
                    break
            result = await run
            await asyncio.sleep(0.2)
            return seen, result, _pids_running(f"sleep {marker}")
        finally:
            await sandbox.destroy()

    seen, result, after = asyncio.run(scenario())
    assert len(seen) >= 2, "the grandchildren must have been running (else the test proves nothing)"
    assert result.timed_out and result.exit_code == 137, f"the exec must report the timeout: {result}"
    assert 2.5 < result.duration_s < 30, (
        f"it must end at the limit, not before or long after: {result.duration_s}"
    )
    assert after == [], f"grandchildren survived the timeout: pids {after}"


def test_cancelling_an_exec_kills_its_process_tree(make_local):
    backend = make_local()
    marker = str(800_000 + os.getpid() % 99_999)

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            run = asyncio.ensure_future(sandbox.exec(f"sleep {marker} & sleep {marker}"))
            for _ in range(50):
                await asyncio.sleep(0.1)
                if len(_pids_running(f"sleep {marker}")) >= 2:
                    break
            run.cancel()
            with pytest.raises(asyncio.CancelledError):
                await run
            await asyncio.sleep(0.2)
            return _pids_running(f"sleep {marker}")
        finally:
            await sandbox.destroy()

    assert asyncio.run(scenario()) == [], "cancelling the exec must kill everything it started"


@pytest.mark.skipif(not AS_ROOT, reason="killing by sandbox uid needs a per-sandbox uid (root)")
def test_a_cancel_that_lands_while_the_exec_is_starting_returns_at_once_and_leaves_nothing(make_local):
    """A cancel in the first milliseconds (mid-spawn, before bwrap tethers its child) must not
    wait for the command: the tree is killed through the sandbox's uid, not left holding pipes."""
    backend = make_local()
    marker = str(700_000 + os.getpid() % 99_999)

    async def scenario() -> tuple[float, list[int]]:
        sandbox = await backend.create(SandboxSpec(timeout_s=120))
        worst = 0.0
        try:
            for i in range(20):
                run = asyncio.ensure_future(sandbox.exec(f"sleep {marker}"))
                await asyncio.sleep(0.0005 * i)  # 0 to 10 ms: spawn, bwrap setup, running
                t0 = time.monotonic()
                run.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await run
                worst = max(worst, time.monotonic() - t0)
            await asyncio.sleep(0.2)
            return worst, _pids_running(f"sleep {marker}")
        finally:
            await sandbox.destroy()

    worst, left = asyncio.run(scenario())
    assert worst < 5.0, f"a cancel during start waited {worst:.1f} s: it waited for the command to end"
    assert left == [], "a cancelled start must not leave the sandboxed command running"


@pytest.mark.skipif(not AS_ROOT, reason="RLIMIT_NPROC per sandbox needs a per-sandbox uid (root)")
def test_a_fork_bomb_hits_the_process_limit_and_the_exec_still_ends(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(processes=24)))
        try:
            bombed = await sandbox.exec(["python3", "-c", FORK_BOMB], timeout_s=60)
            shell_bomb = await sandbox.exec("f() { f | f & }; f; sleep 2", timeout_s=8)
            after = await sandbox.exec("echo alive")
            return bombed, shell_bomb, after
        finally:
            await sandbox.destroy()

    bombed, shell_bomb, after = asyncio.run(scenario())
    started, errno = bombed.stdout.split()
    assert int(started) < 24, f"more processes than the limit started: {bombed.stdout!r}"
    assert errno == b"11", f"the limit must surface as EAGAIN: {bombed.stdout!r} {bombed.stderr[-300:]!r}"
    assert shell_bomb.duration_s < 60, "a shell fork bomb must end by the wall-clock limit at the latest"
    assert after.stdout == b"alive\n", "the sandbox must work again after the bomb"


def test_a_memory_hog_fails_with_memory_error(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(memory_mb=200)))
        try:
            hog = await sandbox.exec(["python3", "-c", "b = bytearray(1 << 30); print('allocated')"])
            small = await sandbox.exec(["python3", "-c", "b = bytearray(50 << 20); print('fine')"])
            return hog, small
        finally:
            await sandbox.destroy()

    hog, small = asyncio.run(scenario())
    assert hog.exit_code == 1 and b"MemoryError" in hog.stderr, f"1 GiB under a 200 MB limit must fail: {hog}"
    assert small.stdout == b"fine\n", f"50 MB under a 200 MB limit must work: {small}"


def test_open_files_and_cpu_time_limits_bite(make_local):
    backend = make_local()
    opener = "import os\nfds = []\ntry:\n    while True: fds.append(os.open('/dev/null', 0))\nexcept OSError as e: print(len(fds), e.errno)"

    async def scenario():
        sandbox = await backend.create(SandboxSpec(resources=Resources(open_files=64, cpu_time_s=1)))
        try:
            files = await sandbox.exec(["python3", "-c", opener])
            spin = await sandbox.exec(["python3", "-c", "while True: pass"], timeout_s=60)
            return files, spin
        finally:
            await sandbox.destroy()

    files, spin = asyncio.run(scenario())
    count, errno = files.stdout.split()
    assert int(count) < 64 and errno == b"24", f"RLIMIT_NOFILE=64 must stop at EMFILE: {files.stdout!r}"
    assert spin.exit_code == 128 + 24 and not spin.timed_out, f"RLIMIT_CPU must SIGXCPU the spinner: {spin}"


def test_the_sandbox_lifetime_caps_every_exec(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(timeout_s=2))
        try:
            first = await sandbox.exec("sleep 30", timeout_s=60)
            second = await sandbox.exec("echo too-late")
            return first, second
        finally:
            await sandbox.destroy()

    started = time.monotonic()
    first, second = asyncio.run(scenario())
    assert first.timed_out and time.monotonic() - started < 20, f"the lifetime must cut the exec: {first}"
    assert second.timed_out and second.stdout == b"", "nothing may run after the lifetime"


def test_installed_harness_clis_are_visible_read_only_even_from_root_only_dirs(make_local):
    """ro_paths (e.g. ~/.cache/clawgym/harnesses) show at the same path, runnable, not writable."""
    cache = Path.home() / f".clawgym-test-harnesses-{os.getpid()}"  # inside the host's 0700 HOME
    (cache / "bin").mkdir(parents=True)
    (cache / "bin" / "fake-cli").write_text("#!/bin/sh\necho fake-cli ran as $(id -un)\n")
    (cache / "bin" / "fake-cli").chmod(0o755)
    backend = make_local(ro_paths=[str(cache)])

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            return await sandbox.exec(f"{cache}/bin/fake-cli; touch {cache}/bin/x 2>&1 || echo refused")
        finally:
            await sandbox.destroy()

    try:
        result = asyncio.run(scenario())
    finally:
        for p in sorted(cache.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        cache.rmdir()
    lines = result.stdout.decode().splitlines()
    expected = "fake-cli ran as sandbox" if AS_ROOT else "fake-cli ran as"
    assert lines[0].startswith(expected), f"the installed CLI must run inside: {result}"
    assert lines[-1] == "refused", f"the harness cache must be read-only: {result}"
