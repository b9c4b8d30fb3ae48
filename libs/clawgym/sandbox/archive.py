"""Tar streams: how files travel into and out of sandboxes that are not on this filesystem.

Packing never follows symlinks (a link is stored as a link), and unpacking uses tarfile's `data`
filter, so an archive a sandbox produced cannot write outside the destination or create device
files, whatever its member names say.
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
            tf.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise InvalidArgument(f"cannot unpack the archive into {dest}: {e}") from e
    return names
