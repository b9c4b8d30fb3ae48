"""`reset_dir` and `seal_dir` on the local backend: the verifier's clean context, made from outside."""

import asyncio

import pytest

from clawgym.errors import InvalidArgument
from clawgym.sandbox import SandboxSpec

# HOME holds the workspace as a nested mount, as ClawGym tasks have it.
SPEC = SandboxSpec(workdir="/root/.openclaw/workspace", home="/root", mounts=["/tests"])

# What a harness could do to the directories before the verifier runs.
TAMPER = """set -e
echo out > /root/.openclaw/workspace/out.txt
mkdir -p /root/.local/bin /root/locked
echo 'cat() { echo 1; }' > /root/.bashrc
touch /root/locked/file && chmod 000 /root/locked
ln -s /root/.openclaw/workspace /root/link
echo evil > /tests/conftest.py && chmod 444 /tests/conftest.py && chmod 555 /tests
echo left > /tmp/left.txt
"""


def test_reset_empties_dirs_the_sandbox_locked_and_keeps_nested_mounts(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SPEC)
        try:
            planted = await sandbox.exec(["bash", "-c", TAMPER])
            for path in ("/tests", "/root", "/tmp"):
                await sandbox.reset_dir(path)
            after = await sandbox.exec(
                "ls -A /tests /tmp; ls -A /root /root/.openclaw; cat /root/.openclaw/workspace/out.txt;"
                " touch /tests/new /root/new /tmp/new && echo writable"
            )
            return planted, after
        finally:
            await sandbox.destroy()

    planted, after = asyncio.run(scenario())
    assert planted.ok, f"the tampering ran: {planted}"
    out = after.stdout.decode()
    assert after.ok and out.endswith("out\nwritable\n"), f"the workspace survives, dirs stay usable: {after}"
    listing = out.split("out\n")[0]
    for gone in ("conftest.py", ".bashrc", ".local", "locked", "link", "left.txt"):
        assert gone not in listing, f"{gone} survived the reset: {listing!r}"
    assert ".openclaw" in listing and "workspace" in listing, "the nested mount point is still there"


def test_a_sealed_dir_is_read_only_even_to_its_former_owner(make_local, tmp_path):
    backend = make_local()
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text("def test_x(): pass\n")

    async def scenario():
        sandbox = await backend.create(SPEC)
        try:
            await sandbox.put_dir(tmp_path / "tests", "/tests")
            await sandbox.seal_dir("/tests")
            tries = await sandbox.exec(
                "cat /tests/test_x.py >/dev/null && echo readable;"
                " touch /tests/conftest.py 2>/dev/null || echo no-create;"
                " chmod 777 /tests 2>/dev/null || echo no-chmod;"
                " rm -f /tests/test_x.py 2>/dev/null; [ -f /tests/test_x.py ] && echo kept;"
                " stat -c %u /tests/test_x.py"
            )
            await sandbox.reset_dir("/tests")  # a reset makes it the sandbox's again
            again = await sandbox.exec("touch /tests/new && echo writable")
            return tries, again
        finally:
            await sandbox.destroy()

    tries, again = asyncio.run(scenario())
    lines = tries.stdout.decode().split()
    assert lines[:4] == ["readable", "no-create", "no-chmod", "kept"], f"sealed means read-only: {tries}"
    if backend.as_root:
        assert lines[4] == "0", "as root, the sealed files are root's, not the sandbox uid's"
    assert again.stdout == b"writable\n", again


def test_only_the_writable_dirs_themselves_can_be_reset_or_sealed(make_local):
    backend = make_local()

    async def scenario():
        sandbox = await backend.create(SPEC)
        try:
            for call in (sandbox.reset_dir, sandbox.seal_dir):
                for path in ("/root/.openclaw", "/tests/sub", "/etc"):
                    with pytest.raises(InvalidArgument, match="not one of the sandbox's writable"):
                        await call(path)
        finally:
            await sandbox.destroy()

    asyncio.run(scenario())
