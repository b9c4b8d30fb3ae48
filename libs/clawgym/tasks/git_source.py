"""Task sources in git repositories: the `SRC` syntax of `clawgym tasks import`, and shallow fetches.

    git+<anything git clone takes>[#REF][:PATH]   git+/srv/repos/tasks.git#v1:tasks
    <scheme>://…[#REF][:PATH]                      https://github.com/org/repo.git#main:tasks
    user@host:repo[#REF][:PATH]                    git@github.com:org/repo.git#:tasks

The fragment is `docker build`'s for git contexts: `#REF:PATH`, `#REF` or `#:PATH`. REF is a
branch, tag or full commit id (default: the remote's HEAD); PATH a folder inside the repository
(default: its root). A ref cannot contain `:` (git check-ref-format), so the first `:` splits.
Anything else is a local path. Each repository (by URL) is one folder of the cache: one
`git fetch --depth 1` of the ref, then a forced checkout of what it fetched; submodules and Git
LFS objects are not fetched. Git never prompts (`GIT_TERMINAL_PROMPT=0`, ssh in batch mode): a
repository that needs credentials it has not got fails. This module knows git, not tasks.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import posixpath
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from clawgym.errors import InvalidArgument, NotFound, Unavailable

GIT_CACHE_DIR = Path.home() / ".cache" / "clawgym" / "git"
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_SCP = re.compile(r"^[\w.-]+@[\w.-]+:")


@dataclass(frozen=True)
class GitSource:
    url: str  # what `git fetch` is given
    ref: str = ""  # "" = the remote's HEAD
    path: str = ""  # a folder inside the repository; "" = its root

    def shown(self) -> str:
        """The source as written back, without any password in the URL (for reports, suite.json)."""
        fragment = f"#{self.ref}:{self.path}" if self.path else (f"#{self.ref}" if self.ref else "")
        return redact(self.url) + fragment


@dataclass(frozen=True)
class Checkout:
    path: Path  # the folder named by the source's PATH, in the cache's work tree
    commit: str  # the commit checked out


def parse_source(src: str) -> GitSource | None:
    """The git repository `src` names, or None when it is a local path (see the module docstring)."""
    if src.startswith("git+"):
        spec = src[len("git+") :]
    elif _URL.match(src) or _SCP.match(src):
        spec = src
    else:
        return None
    url, _, fragment = spec.partition("#")
    ref, _, path = fragment.partition(":")
    if not url:
        raise InvalidArgument(f"{src!r}: no repository before '#'")
    if not _URL.match(url) and not _SCP.match(url):
        url = str(Path(url).expanduser().resolve())  # a local repository; git runs in the cache
    if ref.startswith("-") or url.startswith("-"):
        raise InvalidArgument(f"{src!r}: a ref or repository cannot start with '-'")
    path = posixpath.normpath(path) if path else ""
    if path in (".", ""):
        path = ""
    elif path.startswith("/") or path == ".." or path.startswith("../"):
        raise InvalidArgument(f"{src!r}: PATH {path!r} must be a folder inside the repository")
    return GitSource(url, ref, path)


def redact(url: str) -> str:
    """`url` without the password of its user part, if it has one."""
    if not _URL.match(url):
        return url
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _git(args: list[str], cwd: Path, timeout_s: float) -> str:
    # Never wait for a person: no password prompt, no ssh passphrase or host-key question.
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except FileNotFoundError as e:
        raise Unavailable("git is not installed (Debian: apt-get install git)") from e
    except subprocess.TimeoutExpired as e:
        raise Unavailable(f"git {args[0]} took over {timeout_s:.0f} s") from e
    if done.returncode != 0:
        raise _GitFailed(done.stderr.strip() or f"git {args[0]} exited {done.returncode}")
    return done.stdout.strip()


class _GitFailed(Exception):
    """A git command exited non-zero; its stderr is the message."""


def checkout(source: GitSource, cache_dir: str | Path | None = None, timeout_s: float = 600.0) -> Checkout:
    """Fetches `source.ref` (depth 1) into the repository's cache folder and checks it out.

    NotFound when the ref or PATH does not exist; InvalidArgument when git cannot fetch
    (an unreachable host, no such repository, credentials needed): git's own message says which.
    """
    cache = Path(cache_dir) if cache_dir is not None else GIT_CACHE_DIR
    repo = cache / hashlib.sha256(source.url.encode()).hexdigest()[:16]
    repo.mkdir(parents=True, exist_ok=True)
    shown = source.shown()
    with open(cache / f"{repo.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two imports of one repository take turns
        try:
            if not (repo / ".git").is_dir():
                _git(["init", "-q"], repo, timeout_s)
            _git(
                ["fetch", "-q", "--depth", "1", "--no-tags", source.url, source.ref or "HEAD"],
                repo,
                timeout_s,
            )
            _git(["checkout", "-q", "--force", "--detach", "FETCH_HEAD"], repo, timeout_s)
            _git(["clean", "-q", "-ffdx"], repo, timeout_s)
            commit = _git(["rev-parse", "HEAD"], repo, timeout_s)
        except _GitFailed as e:
            message = str(e).replace(source.url, redact(source.url))
            if "couldn't find remote ref" in message or "not our ref" in message:
                raise NotFound(f"{shown}: no ref {source.ref!r} in the repository ({message})") from e
            raise InvalidArgument(f"{shown}: git could not fetch it: {message}") from e
    folder = (repo / source.path).resolve() if source.path else repo
    if not folder.is_dir() or (folder != repo.resolve() and repo.resolve() not in folder.parents):
        raise NotFound(f"{shown}: no folder {source.path!r} in the repository at {commit[:12]}")
    return Checkout(folder, commit)
