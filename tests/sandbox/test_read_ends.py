"""`Sandbox.read_ends` on each backend: a file's first and last bytes only (a 64 MiB file gives 16
bytes), all of a small one, and a link, a directory or a missing file refused as get_file refuses
them. Local and docker run for real; the pods' script runs here under the same `sh` (no cluster)."""

import asyncio
import secrets
import subprocess
from pathlib import Path

import pytest

from clawgym.errors import InvalidArgument, NotFound
from clawgym.sandbox import DockerSandboxConfig, SandboxConfig, SandboxSpec
from clawgym.sandbox.docker import DockerBackend
from clawgym.sandbox.file_ends import SCRIPT, from_output, output_limit, script_args
from clawgym.sandbox.interface import ExecResult, FileEnds, Sandbox
from tests.sandbox.docker_standin import LOCAL_BASE, has_image

BIG = 64 << 20
MAKE = (
    "mkdir -p out/dir && printf 'HEAD' > out/big && truncate -s 64M out/big && printf 'TAIL' >> out/big"
    " && printf 'small' > out/small && ln -s /etc/hostname out/link"
)
EXPECTED = {
    "big": FileEnds(b"HEAD" + b"\0" * 4, b"\0" * 4 + b"TAIL", BIG + 4),
    "small": FileEnds(b"small", b"", 5),
    "link": InvalidArgument,
    "dir": InvalidArgument,
    "missing": NotFound,
}


async def _read_all(sandbox: Sandbox) -> dict[str, object]:
    made = await sandbox.exec(MAKE)
    assert made.ok, made
    found: dict[str, object] = {}
    for name in EXPECTED:
        try:
            found[name] = await sandbox.read_ends(f"{sandbox.spec.workdir}/out/{name}", 8, 8)
        except (InvalidArgument, NotFound) as e:
            found[name] = type(e)
    with pytest.raises(InvalidArgument, match="must be >= 0"):
        await sandbox.read_ends(f"{sandbox.spec.workdir}/out/small", -1, 8)
    return found


def test_the_local_backend_reads_a_files_ends_only(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SandboxSpec(workdir="/app"))
        try:
            return await _read_all(sandbox)
        finally:
            await sandbox.destroy()

    found = asyncio.run(scenario())
    assert found == EXPECTED, "head and tail of the big file, all of the small one, links never followed"
    assert found["big"].left_out == BIG + 4 - 16


@pytest.mark.docker
def test_the_docker_backend_reads_a_files_ends_only(tmp_path: Path):
    try:
        engine = subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        engine = False
    if not engine or not has_image(LOCAL_BASE):
        pytest.skip(f"no Docker engine answers, or no {LOCAL_BASE}")
    cfg = DockerSandboxConfig(image=LOCAL_BASE, relay_image=LOCAL_BASE, state_dir=str(tmp_path / "state"))
    backend = DockerBackend(SandboxConfig(backend="docker", owner=f"test-{secrets.token_hex(4)}", docker=cfg))

    async def scenario():
        try:
            sandbox = await backend.create(SandboxSpec(workdir="/app", network="none"))
            return await _read_all(sandbox)
        finally:
            await backend.close()

    assert asyncio.run(scenario()) == EXPECTED


def _pod_script(path: Path, head: int, tail: int) -> ExecResult:
    done = subprocess.run(
        ["sh", "-c", SCRIPT, "read-ends", *script_args(str(path), head, tail)], capture_output=True
    )
    return ExecResult(done.returncode, done.stdout, done.stderr, 0.0)


def test_the_pods_script_prints_the_ends_and_its_output_past_what_was_asked_is_refused(tmp_path: Path):
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.write(b"HEAD")
        f.truncate(BIG)
        f.seek(0, 2)
        f.write(b"TAIL")
    (tmp_path / "link").symlink_to(big)
    result = _pod_script(big, 8, 8)
    assert len(result.stdout) <= output_limit(8, 8), "what the pod's exec is capped at"
    assert from_output(result, str(big), 8, 8) == EXPECTED["big"]
    with pytest.raises(InvalidArgument, match="not a regular file"):
        from_output(_pod_script(tmp_path / "link", 8, 8), "link", 8, 8)
    with pytest.raises(NotFound):
        from_output(_pod_script(tmp_path / "missing", 8, 8), "missing", 8, 8)
    # a container whose `head` was replaced prints more than asked: refused, never kept
    flood = ExecResult(0, b"100\n" + b"x" * 64, b"", 0.0)
    with pytest.raises(InvalidArgument, match="unexpected output"):
        from_output(flood, "big", 8, 8)
