"""Running one local process tree to completion: output capture, a wall-clock limit, tree kill.

Owns the mechanics shared by every local exec (the sandbox's argv comes from `local_bwrap`): the
process starts as the leader of a new process group; on timeout or cancellation the group gets
SIGKILL. Under bubblewrap the group's leader is `bwrap` itself, whose death takes the sandbox's
PID namespace, and so every descendant, with it (`--die-with-parent`); without bubblewrap a
descendant that left the group (setsid) can survive, which is why that mode warns.
"""

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence

from clawgym.sandbox.interface import ExecResult

# After the tree is dead, pipes close at once; a descendant that escaped the group (no bwrap)
# may hold them open, so reading its leftovers is bounded.
_DRAIN_AFTER_EXIT_S = 2.0
# Taking a tree down re-kills at this period: a descendant born while bwrap was still setting up
# (before --die-with-parent applied) is only reachable through `kill_extra`, and may appear late.
_REKILL_PERIOD_S = 0.2
_TAKE_DOWN_LIMIT_S = 30.0
# How often `watch` is asked whether to stop the tree (a cheap file read; 0.25 s bounds how long
# a sandbox that went over a cap keeps running).
_WATCH_PERIOD_S = 0.25


class _Capture:
    """Keeps the first `limit` bytes of a stream and notes whether more came."""

    def __init__(self, limit: int) -> None:
        self.limit, self.data, self.truncated = limit, bytearray(), False

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(1 << 16):
            room = self.limit - len(self.data)
            if room > 0:
                self.data += chunk[:room]
            if len(chunk) > room:
                self.truncated = True


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


async def _take_down(proc: asyncio.subprocess.Process, kill_extra: Callable[[], None] | None) -> None:
    """SIGKILLs the group (and `kill_extra`) until the leader is reaped and its pipes are closed.

    `proc.wait()` also waits for the pipes, which an escaped descendant keeps open: so kill again
    until they close, rather than wait for that descendant to finish on its own.
    """
    waiter = asyncio.ensure_future(proc.wait())
    deadline = time.monotonic() + _TAKE_DOWN_LIMIT_S
    while not waiter.done() and time.monotonic() < deadline:
        _kill_group(proc.pid)
        if kill_extra is not None:
            kill_extra()
        await asyncio.wait([waiter], timeout=_REKILL_PERIOD_S)
    if not waiter.done():
        waiter.cancel()


_TIMED_OUT = "timed out"


async def _wait(
    proc: asyncio.subprocess.Process, timeout_s: float, watch: Callable[[], str | None] | None
) -> str | None:
    """None once the leader exits; `_TIMED_OUT` at the deadline; else the reason `watch` gave."""
    deadline = time.monotonic() + max(timeout_s, 0.0)
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return _TIMED_OUT
            period = left if watch is None else min(left, _WATCH_PERIOD_S)
            done, _ = await asyncio.wait([waiter], timeout=period)
            if done:
                return None
            if watch is not None and (reason := watch()):
                return reason
    finally:
        waiter.cancel()


async def _feed(stdin: asyncio.StreamWriter, data: bytes) -> None:
    # The command may exit without reading its input; that is its business, not an error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()


async def run_tree(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout_s: float,
    max_output_bytes: int,
    stdin: bytes | None = None,
    cwd: str | None = None,
    user: int | None = None,
    pass_fds: Sequence[int] = (),
    kill_group_after_exit: bool = False,
    kill_extra: Callable[[], None] | None = None,
    watch: Callable[[], str | None] | None = None,
) -> ExecResult:
    """Runs `argv` as a new process group and returns when it and its output are done.

    `user`: switch to this uid/gid (no supplementary groups) before exec; needs root.
    `kill_group_after_exit`: also SIGKILL what the leader left running in its group (used when
    no PID namespace does that for us).
    `kill_extra`: called with every kill on timeout or cancellation, for what the group cannot
    reach (the local backend kills every process of the sandbox's uid).
    `watch`: asked periodically while the tree runs; a reason it returns takes the tree down, is
    appended to stderr, and the result is exit code 137 (the local backend: a cap was exceeded).
    """
    start = time.monotonic()
    spawn = asyncio.ensure_future(
        asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            process_group=0,
            user=user,
            group=user,
            extra_groups=[] if user is not None else None,
            pass_fds=tuple(pass_fds),
        )
    )
    try:
        # Shielded: a cancel mid-spawn would make asyncio kill only the leader and then wait for
        # pipes that the not-yet-tethered child holds open, i.e. for the whole command.
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await _take_down(await spawn, kill_extra)
        raise
    out, err = _Capture(max_output_bytes), _Capture(max_output_bytes)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [asyncio.ensure_future(out.drain(proc.stdout)), asyncio.ensure_future(err.drain(proc.stderr))]
    feeder = (
        asyncio.ensure_future(_feed(proc.stdin, stdin))
        if proc.stdin is not None and stdin is not None
        else None
    )
    timed_out, stopped = False, None
    try:
        ended = await _wait(proc, timeout_s, watch)
        if ended is None:
            if kill_group_after_exit:
                _kill_group(proc.pid)
        else:
            timed_out, stopped = ended is _TIMED_OUT, None if ended is _TIMED_OUT else ended
            # the leader is not reaped yet, so the group id is still ours
            await _take_down(proc, kill_extra)
        _, pending = await asyncio.wait(readers, timeout=_DRAIN_AFTER_EXIT_S)
        for task in pending:
            task.cancel()
    finally:
        if proc.returncode is None:  # cancelled (or failed) while running: take the tree down
            await asyncio.shield(_take_down(proc, kill_extra))
        for task in (*readers, *([feeder] if feeder else [])):
            task.cancel()
    code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
    result = ExecResult(
        exit_code=code,
        stdout=bytes(out.data),
        stderr=bytes(err.data),
        duration_s=time.monotonic() - start,
        timed_out=timed_out,
        truncated=out.truncated or err.truncated,
    )
    return result if stopped is None else stopped_by(result, stopped)


def stopped_by(result: ExecResult, reason: str) -> ExecResult:
    """`result` as a tree that was stopped for `reason`: exit code 137, the reason on stderr."""
    note = f"\n[sandbox stopped: {reason}]\n".encode()
    return dataclasses.replace(result, exit_code=137, stderr=result.stderr + note)
