"""Reading only a file's first and last bytes (`Sandbox.read_ends`), shared by the backends.

What a reader of files of any size needs (the rubric judge's evidence): memory bounded by what is
asked, never by the file. Not a general reader: `Sandbox.get_file` returns whole files. The local
backend reads both ends through one descriptor (`read_fd`); the container backends (docker,
kubernetes) run `SCRIPT` in the container and split what it prints (`from_output`).
"""

from __future__ import annotations

import os

from clawgym.errors import InvalidArgument, NotFound
from clawgym.sandbox.interface import ExecResult, FileEnds, SandboxFailed, sandbox_path

# $1: the file, $2: head bytes, $3: tail bytes. Prints the file's size on one line, then its first
# $2 and last $3 bytes (all of it when it is no larger than both). Exit 2: nothing there; exit 3: a
# link (never followed) or not a regular file. POSIX sh plus `head -c` (GNU and busybox have it).
SCRIPT = r"""[ -L "$1" ] && exit 3
[ -e "$1" ] || exit 2
[ -f "$1" ] || exit 3
size=$(wc -c < "$1") || exit 4
echo $size
if [ "$size" -le $(($2 + $3)) ]; then exec head -c $(($2 + $3)) -- "$1"; fi
head -c "$2" -- "$1" && exec tail -c "$3" -- "$1"
"""

SIZE_LINE_BYTES = 24  # room for the size line in `SCRIPT`'s output


def _check(head: int, tail: int) -> None:
    if head < 0 or tail < 0:
        raise InvalidArgument(f"read_ends: head ({head}) and tail ({tail}) must be >= 0")


def _pread(fd: int, n: int, offset: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_fd(fd: int, head: int, tail: int) -> FileEnds:
    """The ends of the regular file open at `fd` (positioned reads: the middle is never touched)."""
    _check(head, tail)
    size = os.fstat(fd).st_size
    if size <= head + tail:
        return FileEnds(_pread(fd, head + tail, 0), b"", size)
    return FileEnds(_pread(fd, head, 0), _pread(fd, tail, size - tail), size)


def script_args(path: str, head: int, tail: int) -> list[str]:
    """`SCRIPT`'s arguments (checked: a negative count would make `head -c` print all but the end)."""
    _check(head, tail)
    return [sandbox_path(path), str(head), str(tail)]


def output_limit(head: int, tail: int) -> int:
    """The most `SCRIPT` prints for these ends: the bound to run it under."""
    return head + tail + SIZE_LINE_BYTES


def check_exit(result: ExecResult, path: str, missing: str = "no such file in the sandbox") -> None:
    """The container file scripts' way of failing as typed errors: exit 2, nothing at `path`
    (`missing` says so); exit 3, not a regular file (links are not followed); any other failure."""
    if result.exit_code == 2:
        raise NotFound(f"{path}: {missing}")
    if result.exit_code == 3:
        raise InvalidArgument(f"{path} is not a regular file (links are not followed)")
    if result.timed_out or result.exit_code != 0:
        raise SandboxFailed(f"reading {path} failed: {result.stderr[-500:].decode(errors='replace').strip()}")


def from_output(result: ExecResult, path: str, head: int, tail: int) -> FileEnds:
    """The ends `SCRIPT` printed. Output past what was asked (a container whose `head` was replaced)
    is refused as unreadable, never kept."""
    check_exit(result, path)
    line, newline, data = result.stdout.partition(b"\n")
    digits = line.strip()
    if result.truncated or not newline or not digits.isdigit() or len(digits) > 19 or len(data) > head + tail:
        raise InvalidArgument(f"{path}: reading its ends gave unexpected output")
    size = int(digits)
    if size <= head + tail:
        return FileEnds(data, b"", size)
    split = max(0, len(data) - tail)
    return FileEnds(data[:split], data[split:], size)
