"""Builds clawgym's images with the local Docker engine, in dependency order, and reports what each cost.

    python deploy/images.py build                      # the service images from the official bases
    python deploy/images.py build --standins \\
        --torch-wheels /opt/wheels                     # a machine without a registry (CI, tests)
    python deploy/images.py build --only store proxy   # some of them
    python deploy/images.py list                       # names and tags, no build

One `docker build` per image, sequential, so each reuses the layers the previous ones left (the
dependency venvs and the project layer are shared by every service built from deploy/docker/Dockerfile).
`--standins` first builds the stand-ins of deploy/docker/standins.Dockerfile FROM the local Debian base
and passes them as the base-image build arguments. `--torch-wheels DIR` serves DIR on a loopback port
for the build (with the host's network) and takes torch from there instead of the PyTorch index.
The builds use the classic builder (DOCKER_BUILDKIT=0), which every engine has; the files stay valid
for BuildKit. An image a rebuild replaced is removed, and untagged images over a day old are
pruned (younger ones are the layer cache). The last line printed is one JSON object: per image,
seconds and bytes.

Standard library only: it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = "deploy/docker/Dockerfile"
STANDINS = "deploy/docker/standins.Dockerfile"
SANDBOX_PYTHON = "deploy/docker/sandbox-python.Dockerfile"
SANDBOX_NODE = "deploy/docker/sandbox-node.Dockerfile"
WHEEL_PORT = 47391  # the --torch-wheels server's port, the same every build (see serve_folder)


def version() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


@dataclass(frozen=True)
class Image:
    name: str  # what --only selects
    tag: str
    dockerfile: str
    target: str = ""
    context: str = "."  # relative to the repository root
    standin: bool = False
    args: tuple[tuple[str, str], ...] = ()  # build arguments this image needs (besides the base images)


def standin_images() -> list[Image]:
    """Stand-ins for python, node, postgres, redis and prometheus (names as their official images)."""
    roles = {"python": "3.11", "node": "24", "postgres": "15", "redis": "7", "prometheus": "2"}
    return [
        Image(f"standin-{r}", f"clawgym-standin/{r}:{v}", STANDINS, r, standin=True) for r, v in roles.items()
    ]


def project_images(tag: str) -> list[Image]:
    """The service images (deploy/docker/Dockerfile targets) and the sandbox images for the harnesses."""
    services = ["store", "orchestrator", "orchestrator-local", "inference", "proxy", "trainer"]
    images = [Image(s, f"clawgym/{s}:{tag}", DOCKERFILE, s) for s in services]
    images.append(
        Image("sandbox-python", f"clawgym/sandbox-python:{tag}", SANDBOX_PYTHON, context="deploy/docker")
    )
    # one Node harness image per harness (each CLI is 150-650 MB); `--only sandbox-<harness>`
    for harness in ("claude-code", "openclaw", "codex", "opencode", "qwen-code"):
        images.append(
            Image(
                f"sandbox-{harness}",
                f"clawgym/sandbox-{harness}:{tag}",
                SANDBOX_NODE,
                "harness",
                "deploy/docker",
                args=(("HARNESS", harness),),
            )
        )
    return images


DEFAULT_SET = [
    "store",
    "orchestrator",
    "orchestrator-local",
    "inference",
    "proxy",
    "trainer",
    "sandbox-python",
]


@dataclass
class Built:
    image: Image
    seconds: float
    size: int
    cached_steps: int = 0
    steps: int = 0


@dataclass
class Builder:
    standins: bool = False
    torch_find_links: str = ""
    no_cache: bool = False
    quiet: bool = False
    results: list[Built] = field(default_factory=list)

    def base_args(self) -> dict[str, str]:
        if not self.standins:
            return {}
        return {
            "PYTHON_IMAGE": "clawgym-standin/python:3.11",
            "NODE_IMAGE": "clawgym-standin/node:24",
            "BASE_IMAGE": "localhost/debian:bookworm",
        }

    def build(self, image: Image) -> Built:
        args = {**self.base_args(), **dict(image.args)}
        if self.torch_find_links and image.dockerfile == DOCKERFILE:
            args |= {"TORCH_INDEX": "", "TORCH_FIND_LINKS": self.torch_find_links}
        argv = ["docker", "build", "-f", str(REPO / image.dockerfile), "-t", image.tag]
        if image.target:
            argv += ["--target", image.target]
        for key, value in args.items():
            if declares_arg(REPO / image.dockerfile, key):
                argv += ["--build-arg", f"{key}={value}"]
        if self.standins or self.torch_find_links:
            # A registry-free machine reaches its package registries from the host's own network;
            # a build on the bridge also needs IPv4 forwarding, which such a machine may not have.
            # The wheel server of --torch-find-links listens on the host's loopback.
            argv += ["--network", "host"]
        if self.no_cache:
            argv.append("--no-cache")
        argv.append(str(REPO / image.context))
        replaced = image_id(image.tag)
        started = time.monotonic()
        log = run_build(argv, quiet=self.quiet)
        built = Built(image, time.monotonic() - started, image_size(image.tag))
        if replaced and replaced != image_id(image.tag):
            remove_replaced(replaced)
        built.steps = len(re.findall(r"^Step \d+/\d+ :", log, re.M))
        built.cached_steps = log.count("---> Using cache")
        self.results.append(built)
        return built

    def report(self) -> dict:
        return {
            b.image.name: {
                "tag": b.image.tag,
                "seconds": round(b.seconds, 1),
                "bytes": b.size,
                "steps": b.steps,
                "cached_steps": b.cached_steps,
            }
            for b in self.results
        }


@functools.cache
def _declared_args(dockerfile: Path) -> frozenset[str]:
    return frozenset(re.findall(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)", dockerfile.read_text(), re.M))


def declares_arg(dockerfile: Path, name: str) -> bool:
    """Passing an ARG a Dockerfile does not declare makes the classic builder warn: pass only known ones."""
    return name in _declared_args(dockerfile)


def run_build(argv: list[str], quiet: bool) -> str:
    env = {**os.environ, "DOCKER_BUILDKIT": "0"}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if not quiet:
            sys.stderr.write(line)
    if proc.wait() != 0:
        tail = "".join(lines[-60:])
        raise SystemExit(f"images.py: {' '.join(argv[:8])}… failed ({proc.returncode}):\n{tail}")
    return "".join(lines)


def image_size(tag: str) -> int:
    out = subprocess.run(
        ["docker", "image", "inspect", "-f", "{{.Size}}", tag], capture_output=True, text=True
    )
    return int(out.stdout.strip() or 0)


@contextmanager
def serve_folder(folder: Path, port: int = WHEEL_PORT) -> Iterator[str]:
    """An HTTP server for `folder` on loopback `port` (taken: a free one), its listing a pip
    --find-links page. The URL is a build argument of the torch venv's RUN, so it is part of that
    layer's cache key: a port that changed every build rebuilt the venv every build."""
    handler = functools.partial(_QuietHandler, directory=str(folder))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def select(names: list[str], standins: bool) -> list[Image]:
    tag = version()
    everything = {i.name: i for i in [*standin_images(), *project_images(tag)]}
    unknown = [n for n in names if n not in everything]
    if unknown:
        raise SystemExit(f"images.py: unknown image(s) {unknown}; known: {sorted(everything)}")
    chosen = [everything[n] for n in (names or DEFAULT_SET)]
    if standins:
        chosen = [i for i in standin_images() if i not in chosen] + chosen
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build images (default: the services and the Python sandbox)")
    build.add_argument("--only", nargs="+", default=[], help="image names (see `list`)")
    build.add_argument("--standins", action="store_true", help="build and use the registry-free stand-ins")
    build.add_argument("--torch-wheels", default="", help="a folder holding the torch wheel to install")
    build.add_argument("--no-cache", action="store_true", help="build every layer again (cold build)")
    build.add_argument("--quiet", action="store_true", help="no build output, only the JSON line")
    sub.add_parser("list", help="print the images this script knows")
    args = parser.parse_args(argv)
    if args.command == "list":
        for image in [*standin_images(), *project_images(version())]:
            print(f"{image.name:22} {image.tag:42} {image.dockerfile} {image.target}")
        return 0
    images = select(args.only, args.standins)
    builder = Builder(standins=args.standins, no_cache=args.no_cache, quiet=args.quiet)
    with wheel_server(args.torch_wheels) as links:
        builder.torch_find_links = links
        for image in images:
            built = builder.build(image)
            print(
                f"images.py: {image.tag} in {built.seconds:.0f} s, {built.size / 1e6:.0f} MB", file=sys.stderr
            )
    prune_dangling()
    print(json.dumps(builder.report()))
    return 0


def image_id(tag: str) -> str:
    out = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", tag], capture_output=True, text=True)
    return out.stdout.strip()


def remove_replaced(old_id: str) -> None:
    """Removes the image a rebuild took the tag from: it holds GBs of layers no tag names any more
    (the venv copied into every service image), and a day of rebuilds filled a CI disk with them.
    Still used by a container: kept (docker says why)."""
    subprocess.run(["docker", "image", "rm", old_id], capture_output=True, text=True)


def prune_dangling() -> None:
    """Drops the untagged images over a day old (stage results of earlier sources: the policies
    converted again for each code change, ~600 MB each). Younger ones are the layer cache of the
    builds at hand: pruning them would make the next build redo the dependency venvs."""
    done = subprocess.run(
        ["docker", "image", "prune", "-f", "--filter", "until=24h"], capture_output=True, text=True
    )
    if done.returncode != 0:
        print(f"images.py: docker image prune failed: {done.stderr.strip()}", file=sys.stderr)


@contextmanager
def wheel_server(folder: str) -> Iterator[str]:
    """The find-links URL serving `folder` while the builds run ('' when no folder is given)."""
    if not folder:
        yield ""
        return
    with serve_folder(Path(folder)) as url:
        yield url


if __name__ == "__main__":
    raise SystemExit(main())
