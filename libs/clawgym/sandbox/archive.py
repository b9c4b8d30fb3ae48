"""Tar streams: how files travel into and out of sandboxes that are not on this filesystem.

Packing never follows symlinks (a link is stored as a link), and unpacking uses tarfile's `data`
filter, so an archive a sandbox produced cannot write outside the destination or create device
files, whatever its member names say. Pythons before 3.11.4 (Debian 12's 3.11.2) have no filters:
there the same rules are checked member by member before anything is written.
"""

import io
import os
import tarfile
from pathlib import Path

from clawgym.errors import InvalidArgument


def tar_of_file(name: str, data: bytes, mode: int = 0o644) -> bytes:
    """A tar holding one regular file `name` (relative) with `data`."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), mode
        tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_of_dir(local_dir: Path) -> bytes:
    """A tar of the contents of `local_dir`, members named relative to it, symlinks kept as links."""
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise InvalidArgument(f"{local_dir} is not a directory")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for entry in sorted(os.listdir(local_dir)):
            tf.add(local_dir / entry, arcname=entry, recursive=True)
    return buf.getvalue()


def extract_tar(data: bytes, dest: Path) -> list[str]:
    """Unpacks `data` into `dest` with the `data` filter; returns the member names."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
            names = tf.getnames()
            if hasattr(tarfile, "data_filter"):
                tf.extractall(dest, filter="data")
            else:
                members = [_checked(m, dest) for m in tf.getmembers()]
                tf.extractall(dest, members=members)
    except (tarfile.TarError, OSError) as e:
        raise InvalidArgument(f"cannot unpack the archive into {dest}: {e}") from e
    return names


def _checked(member: tarfile.TarInfo, dest: Path) -> tarfile.TarInfo:
    """The `data` filter's rules, for Pythons without it: names made relative; only files, folders
    and links that stay inside `dest`; no device or fifo; no setuid/setgid/sticky bits; owner left
    to the extractor."""
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    member.name = member.name.lstrip("/")  # as the filter does: an absolute name lands inside
    if not inside(os.path.join(root, member.name)):
        raise tarfile.TarError(f"member {member.name!r} would land outside the destination")
    if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
        raise tarfile.TarError(f"member {member.name!r} is a special file")
    if member.issym():
        target = os.path.join(root, os.path.dirname(member.name), member.linkname)
        if os.path.isabs(member.linkname) or not inside(target):
            raise tarfile.TarError(f"link {member.name!r} points outside the destination")
    if member.islnk() and (os.path.isabs(member.linkname) or not inside(os.path.join(root, member.linkname))):
        raise tarfile.TarError(f"hard link {member.name!r} points outside the destination")
    member.mode &= 0o777 if member.isdir() else 0o755 if member.mode & 0o100 else 0o644
    member.uid = member.gid = os.getuid()
    member.uname = member.gname = ""
    return member
