"""A sandbox's environment never reaches the processes that start it on the host.

The local backend's launchers (the cgroup join, `prlimit`, `bwrap`) run on the host, as root in CI,
in the host's namespaces. Before a sandbox exists, anything in their environment acts with those
powers: a task's `ENV LD_PRELOAD=<library>` ran the library in every launcher, and a task's
`PATH` chose which `prlimit` ran. These tests attack with a real compiled library and real
programs on the host, through real bubblewrap.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from clawgym.errors import InvalidArgument
from clawgym.sandbox import SandboxSpec
from clawgym.sandbox.environment import LAUNCHER_ENV

PRELOAD_C = r"""
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void hit(void) {
    FILE *f = fopen("%s", "a");
    if (f) { fprintf(f, "loaded in pid %%d as uid %%d\n", (int)getpid(), (int)getuid()); fclose(f); }
}
"""


@pytest.fixture
def preload_library(tmp_path: Path) -> tuple[Path, Path]:
    """(a shared library that appends to a host marker file when loaded, that marker's path)."""
    if shutil.which("cc") is None:
        pytest.fail("a C compiler (cc) is needed to build the attack's library")
    marker = tmp_path / "host-marker"
    source = tmp_path / "evil.c"
    source.write_text(PRELOAD_C % marker)
    library = tmp_path / "evil.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    os.chmod(tmp_path, 0o755)
    return library, marker


def test_a_loader_variable_in_a_spec_or_an_exec_is_refused_and_nothing_loads(make_local, preload_library):
    library, marker = preload_library
    backend = make_local()

    async def scenario() -> tuple[str, str]:
        with pytest.raises(InvalidArgument) as in_spec:
            sandbox = await backend.create(SandboxSpec(env={"LD_PRELOAD": str(library)}))
            await sandbox.exec("true")  # reached only when the spec was taken
        sandbox = await backend.create(SandboxSpec())
        try:
            with pytest.raises(InvalidArgument) as in_exec:
                await sandbox.exec("true", env={"LD_PRELOAD": str(library)})
            assert (await sandbox.exec("echo fine")).stdout == b"fine\n", "the sandbox stays usable"
        finally:
            await sandbox.destroy()
        return str(in_spec.value), str(in_exec.value)

    spec_error, exec_error = asyncio.run(scenario())
    assert "LD_PRELOAD" in spec_error and "LD_PRELOAD" in exec_error, (spec_error, exec_error)
    assert not marker.exists(), f"the library was loaded on the host: {marker.read_text()}"


def _write_script(path: Path, body: str) -> None:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def test_the_launchers_take_no_program_from_the_sandbox_path(make_local, tmp_path: Path):
    """A task's PATH naming a host folder with its own `prlimit` and `bwrap` chose the launchers
    (run as root on the host); now it applies only inside the sandbox."""
    bin_dir = tmp_path / "evil-bin"
    bin_dir.mkdir(parents=True)
    marker = tmp_path / "host-marker"
    for name in ("prlimit", "bwrap", "sh", "setpriv"):
        real = shutil.which(name)
        assert real is not None, name
        _write_script(bin_dir / name, f'#!/bin/sh\necho "{name} as $(id -u)" >> {marker}\nexec {real} "$@"\n')
    os.chmod(tmp_path, 0o755)
    path = f"{bin_dir}:/usr/local/bin:/usr/bin:/bin"
    backend = make_local()

    async def scenario() -> bytes:
        sandbox = await backend.create(SandboxSpec(env={"PATH": path}))
        try:
            return (await sandbox.exec('printf %s "$PATH"')).stdout
        finally:
            await sandbox.destroy()

    seen_inside = asyncio.run(scenario())
    assert not marker.exists(), f"a launcher came from the task's PATH: {marker.read_text()}"
    assert seen_inside == path.encode(), "the sandbox's own PATH still applies inside it"


def _environ_of_processes_running(argv0: str) -> list[dict[str, str]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if os.path.basename(cmdline[0].decode(errors="replace")) != argv0:
                continue
            raw = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        found.append(dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item))
    return found


def test_bwrap_runs_with_the_fixed_launcher_environment_and_secrets_stay_out_of_argv(make_local):
    """While a sandbox runs, the host's bwrap process has only `LAUNCHER_ENV`, and a secret of the
    sandbox's environment is in no host process's command line."""
    secret = "sk-clawgym-test-9f3b2c71"
    backend = make_local()

    async def scenario() -> tuple[list[dict[str, str]], list[int], bytes]:
        sandbox = await backend.create(SandboxSpec(env={"API_KEY": secret}))
        try:
            running = asyncio.ensure_future(sandbox.exec('sleep 2; printf %s "$API_KEY"'))
            await asyncio.sleep(1.0)
            environs = _environ_of_processes_running("bwrap")
            leaked = [
                int(p) for p in os.listdir("/proc") if p.isdigit() and _cmdline_holds(int(p), secret.encode())
            ]
            return environs, leaked, (await running).stdout
        finally:
            await sandbox.destroy()

    environs, leaked, out = asyncio.run(scenario())
    assert environs, "the exec's bwrap was not found running"
    for env in environs:
        env.pop("PWD", None)  # exported by the cgroup join's shell: the launcher's own directory
        assert env == dict(LAUNCHER_ENV), f"bwrap on the host saw more than the launcher env: {env}"
    assert leaked == [], f"the secret is in the command line of host processes {leaked}"
    assert out == secret.encode(), "the secret still reaches the command inside"


def _cmdline_holds(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
