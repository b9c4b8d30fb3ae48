"""The local backend's files, mounts and exec contract: what goes in comes out, at the task's paths."""

import asyncio
import io
import os
import tarfile
from pathlib import Path

import pytest

from clawgym.errors import FailedPrecondition, InvalidArgument, NotFound
from clawgym.sandbox import SandboxSpec
from clawgym.sandbox.archive import extract_tar
from tests.sandbox.killed_owner import sandbox_of_a_killed_process

TASK_SPEC = SandboxSpec(workdir="/app", mounts=["/tests", "/root/.openclaw/workspace", "/logs/verifier"])


def _task_dir(root: Path) -> Path:
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("VALUE = 41\n")
    (root / "run.sh").write_text("#!/bin/sh\necho ran\n")
    (root / "run.sh").chmod(0o755)
    (root / "blob.bin").write_bytes(bytes(range(256)) * 64)
    os.symlink("src/pkg/mod.py", root / "link.py")
    return root


def test_put_and_get_round_trip_bytes_dirs_modes_and_links(make_local, tmp_path: Path):
    backend = make_local()
    task = _task_dir(tmp_path / "task")
    payload = bytes(range(256)) * 1000

    async def scenario():
        sandbox = await backend.create(TASK_SPEC)
        try:
            await sandbox.put_file("/app/data/payload.bin", payload, mode=0o600)
            await sandbox.put_dir(task, "/app/task")
            got = await sandbox.get_file("/app/data/payload.bin")
            tar = await sandbox.get_tar("/app/task")
            ran = await sandbox.exec("./task/run.sh && stat -c %a data/payload.bin && cat task/link.py")
            return got, tar, ran
        finally:
            await sandbox.destroy()

    got, tar, ran = asyncio.run(scenario())
    assert got == payload, "get_file must return exactly the bytes put_file wrote"
    assert ran.stdout == b"ran\n600\nVALUE = 41\n", f"the task sees the files, modes and links: {ran}"
    out = tmp_path / "out"
    names = extract_tar(tar, out)
    assert "task/src/pkg/mod.py" in names, f"get_tar members are named from the dir's own name: {names}"
    assert (out / "task" / "blob.bin").read_bytes() == (task / "blob.bin").read_bytes(), (
        "binary file round trip"
    )
    assert os.readlink(out / "task" / "link.py") == "src/pkg/mod.py", "symlinks travel as links"
    assert os.access(out / "task" / "run.sh", os.X_OK), "the executable bit survives"


def test_mounts_appear_at_the_tasks_absolute_paths_and_are_separate(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(TASK_SPEC)
        try:
            await sandbox.put_file("/tests/test_x.py", b"def test_x(): pass\n")
            await sandbox.put_file("/root/.openclaw/workspace/input.txt", b"claw input\n")
            run = await sandbox.exec(
                "pwd; ls /tests; cat /root/.openclaw/workspace/input.txt; ls -A /app; "
                "echo 0.75 > /logs/verifier/reward.txt; echo note > ~/.note"
            )
            reward = await sandbox.get_file("/logs/verifier/reward.txt")
            note = await sandbox.get_file("/root/.note")
            return run, reward, note
        finally:
            await sandbox.destroy()

    run, reward, note = asyncio.run(scenario())
    assert run.stdout == b"/app\ntest_x.py\nclaw input\n", f"each mount at its path, /app empty: {run}"
    assert reward == b"0.75\n", "a file the task wrote under a mount is readable with get_file"
    assert note == b"note\n", "HOME is writable and readable back"


def test_get_never_follows_a_link_the_task_planted_and_put_replaces_it(make_local):
    backend = make_local()
    original = Path("/etc/hostname").read_bytes()

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            await sandbox.exec("ln -s /etc/hostname /workspace/leak && ln -s /etc /workspace/etcdir")
            with pytest.raises(InvalidArgument):
                await sandbox.get_file("/workspace/leak")
            with pytest.raises(InvalidArgument):
                await sandbox.get_file("/workspace/etcdir/hostname")
            with pytest.raises(InvalidArgument):
                await sandbox.put_file("/workspace/etcdir/hostname", b"pwned\n")
            await sandbox.put_file("/workspace/leak", b"replaced\n")
            tar = await sandbox.get_tar("/workspace")
            return await sandbox.exec("cat /workspace/leak; test -L /workspace/leak && echo still-link"), tar
        finally:
            await sandbox.destroy()

    result, tar = asyncio.run(scenario())
    assert Path("/etc/hostname").read_bytes() == original, "writing through a planted link reached the host"
    assert result.stdout == b"replaced\n", f"put_file replaces the link with a file: {result}"
    with tarfile.open(fileobj=io.BytesIO(tar)) as tf:
        etc = tf.getmember("workspace/etcdir")
    assert etc.issym() and etc.linkname == "/etc", "get_tar keeps links as links instead of copying /etc"


def test_bad_paths_are_typed_errors(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            for path in ["relative/x", "/etc/passwd", "/workspace/../etc/passwd", "/usr/bin/env"]:
                with pytest.raises(InvalidArgument):
                    await sandbox.put_file(path, b"x")
            with pytest.raises(NotFound):
                await sandbox.get_file("/workspace/missing.txt")
            with pytest.raises(NotFound):
                await sandbox.get_tar("/workspace/missing")
            with pytest.raises(InvalidArgument):
                await sandbox.exec([])
        finally:
            await sandbox.destroy()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    "spec",
    [
        SandboxSpec(workdir="relative"),
        SandboxSpec(mounts=["/app", "/app"]),
        SandboxSpec(mounts="/app"),
        SandboxSpec(mounts=["/proc/x"]),
        SandboxSpec(env={"BAD-NAME": "x"}),
        SandboxSpec(labels={"clawgym.dev/run": "has space"}),
        SandboxSpec(timeout_s=0),
        SandboxSpec(mounts=["/usr/no-such-dir-clawgym"]),
    ],
)
def test_a_bad_spec_is_refused_with_invalid_argument(make_local, spec):
    backend = make_local()
    with pytest.raises(InvalidArgument):
        asyncio.run(backend.create(spec))
    assert not [p for p in backend.root.iterdir() if not p.name.startswith(".")], "nothing may be left behind"


def test_exec_contract_stdin_cwd_exit_codes_and_truncation(make_local):
    backend = make_local(max_output_bytes=4096)

    async def scenario():
        sandbox = await backend.create(SandboxSpec(mounts=["/app"]))
        try:
            piped = await sandbox.exec(["sh", "-c", "tr a-z A-Z"], stdin=b"hello stdin")
            where = await sandbox.exec(["pwd"], cwd="/app")
            failed = await sandbox.exec("echo oops >&2; exit 7")
            killed = await sandbox.exec("kill -TERM $$")
            flood = await sandbox.exec("head -c 100000 /dev/zero")
            return piped, where, failed, killed, flood
        finally:
            await sandbox.destroy()

    piped, where, failed, killed, flood = asyncio.run(scenario())
    assert piped.stdout == b"HELLO STDIN" and piped.ok, f"stdin reaches the command: {piped}"
    assert where.stdout == b"/app\n", f"cwd is honoured: {where}"
    assert (failed.exit_code, failed.stderr) == (7, b"oops\n"), f"exit code and stderr: {failed}"
    assert killed.exit_code == 128 + 15, f"signal deaths read as 128+N: {killed}"
    assert flood.truncated and len(flood.stdout) == 4096, (
        f"output is capped at max_output_bytes: {len(flood.stdout)}"
    )


def test_destroy_removes_everything_and_reap_clears_only_an_owners_leftovers(make_local):
    crashed = make_local(owner="orch-a")
    stranger = make_local(owner="orch-b")

    async def scenario():
        left = [await crashed.create(SandboxSpec()) for _ in range(2)]
        others = await stranger.create(SandboxSpec())
        done = await crashed.create(SandboxSpec())
        await done.destroy()
        await done.destroy()  # idempotent
        with pytest.raises(FailedPrecondition):
            await done.exec("true")
        crashed.locks.release()  # its process ends (a crash): the instance's lock goes with it
        restarted = make_local(owner="orch-a")  # the same owner after a restart
        live = await restarted.create(SandboxSpec())
        reaped = await restarted.reap()
        return left, others, done, live, reaped

    left, others, done, live, reaped = asyncio.run(scenario())
    assert not done.storage.exists(), "destroy deletes the sandbox's storage"
    assert reaped == 2 and not any(s.storage.exists() for s in left), "reap deletes the owner's leftovers"
    assert others.storage.exists(), "reap never touches another owner's sandboxes"
    assert live.storage.exists(), "reap never touches sandboxes this process holds"


def test_reap_keeps_a_live_peers_sandboxes_of_the_same_owner_and_takes_a_killed_ones(
    make_local, sandbox_root
):
    """Two orchestrators with one owner (the default: the host name): the second's reap used to
    delete the first's live sandbox mid-rollout. Each backend is now an instance of the owner, and
    reap takes only what a gone instance left: a live peer's sandbox stays usable, while the
    sandbox of a process killed -9 (its instance's lock released by the kernel) is deleted."""
    peer = make_local(owner="shared")
    killed = sandbox_of_a_killed_process(
        {"owner": "shared", "local": {"root_dir": str(sandbox_root), "isolation": "bwrap"}}
    )
    assert (sandbox_root / killed / "meta.json").is_file(), "test setup: the killed process left its sandbox"

    async def scenario():
        live = await peer.create(SandboxSpec())
        await live.put_file("/workspace/state.txt", b"mid-rollout\n")
        second = make_local(owner="shared")  # another orchestrator, same configured owner
        reaped = await second.reap()
        after = await live.exec("cat state.txt")
        await peer.close()
        return reaped, after

    reaped, after = asyncio.run(scenario())
    assert after.stdout == b"mid-rollout\n", f"the live peer's sandbox is intact and usable: {after}"
    assert not (sandbox_root / killed).exists(), "the killed process's sandbox is reaped"
    assert reaped == 1, f"only the dead instance's sandbox is taken: reaped {reaped}"


def test_without_bubblewrap_commands_still_run_but_mounts_are_refused(make_local, caplog):
    backend = make_local(isolation="none")

    async def scenario():
        sandbox = await backend.create(SandboxSpec())
        try:
            await sandbox.put_file("/workspace/in.txt", b"plain\n")
            result = await sandbox.exec("cat in.txt; echo $HOME")
        finally:
            await sandbox.destroy()
        with pytest.raises(FailedPrecondition):
            await backend.create(SandboxSpec(mounts=["/app"]))
        return result

    result = asyncio.run(scenario())
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "plain", f"exec runs in the workspace's host directory: {result}"
    assert lines[1].startswith(str(backend.root)), f"HOME is the sandbox's own directory: {lines}"


def test_the_config_picks_the_backend_and_env_reaches_the_sandbox_section(monkeypatch, sandbox_root):
    from clawgym.config import load_config
    from clawgym.sandbox import make_sandbox_backend

    monkeypatch.setenv("CLAWGYM_SANDBOX__LOCAL__ROOT_DIR", str(sandbox_root))
    monkeypatch.setenv("CLAWGYM_SANDBOX__OWNER", "orchestrator-0")
    cfg = load_config()
    backend = make_sandbox_backend(cfg.sandbox)
    assert (backend.name, backend.owner, backend.root) == ("local", "orchestrator-0", sandbox_root), (
        "CLAWGYM_SANDBOX__* must configure the backend the factory builds"
    )
    with pytest.raises(InvalidArgument):
        load_config(sandbox={"backend": "podman"})  # local, kubernetes and docker only
