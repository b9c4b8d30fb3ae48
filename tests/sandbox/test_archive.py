"""Unpacking an archive a sandbox produced: nothing lands outside the destination, with or without
tarfile's `data` filter (Pythons before 3.11.4, such as Debian 12's 3.11.2, have none)."""

import io
import tarfile
from pathlib import Path

import pytest

from clawgym.errors import InvalidArgument
from clawgym.sandbox.archive import extract_tar, tar_of_dir


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    return info


@pytest.fixture(params=["filter", "no-filter"])
def python(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no-filter":
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    return request.param


@pytest.mark.parametrize(
    "member",
    [
        _member("../escape.txt"),
        _member("out", tarfile.SYMTYPE, "/etc/passwd"),
        _member("out", tarfile.SYMTYPE, "../../outside"),
        _member("hard", tarfile.LNKTYPE, "../outside"),
        _member("dev", tarfile.CHRTYPE),
        _member("fifo", tarfile.FIFOTYPE),
    ],
    ids=["dotdot", "abs-symlink", "escaping-symlink", "escaping-hardlink", "device", "fifo"],
)
def test_members_that_would_leave_the_destination_are_refused(
    python: str, member: tarfile.TarInfo, tmp_path: Path
):
    dest = tmp_path / "dest"
    with pytest.raises(InvalidArgument):
        extract_tar(_tar((member, b"x")), dest)
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "outside").exists()


def test_an_absolute_name_lands_inside_the_destination(python: str, tmp_path: Path):
    extract_tar(_tar((_member("/abs/file.txt"), b"x")), tmp_path / "dest")
    assert (tmp_path / "dest" / "abs" / "file.txt").read_bytes() == b"x"


def test_files_links_and_modes_round_trip(python: str, tmp_path: Path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "sub" / "run.sh").write_text("#!/bin/sh\n")
    (src / "sub" / "run.sh").chmod(0o755)
    (src / "link").symlink_to("sub/run.sh")
    data = tar_of_dir(src)
    extra = _tar((_member("setuid", mode=0o4755), b"s"))
    out = tmp_path / "out"
    assert sorted(extract_tar(data, out)) == ["link", "sub", "sub/run.sh"]
    assert (out / "link").readlink() == Path("sub/run.sh")
    assert (out / "sub" / "run.sh").stat().st_mode & 0o777 == 0o755
    extract_tar(extra, out)
    assert (out / "setuid").stat().st_mode & 0o7000 == 0, "no setuid bit survives"
