"""The local stand-in for a task's base image where no registry answers (../shared/docker-local).

`clawgym-test/python3:bookworm` is `localhost/debian:bookworm` with python3 and pytest, built once
per machine; it is also tagged as Terminal-Bench's python base (what the sample task's FROM names)
unless an image of that name exists, so the classic builder uses it without pulling.
"""

import subprocess

from tests.engines import docker_answers, require_engine

LOCAL_BASE = "localhost/debian:bookworm"
STANDIN = "clawgym-test/python3:bookworm"
TB_BASE = "ghcr.io/laude-institute/t-bench/python-3-13:20250620"
DOCKERFILE = (
    f"FROM {LOCAL_BASE}\nRUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install"
    " -y -qq --no-install-recommends python3 python3-pytest && rm -rf /var/lib/apt/lists/*\n"
)


def has_image(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True).returncode == 0


def ensure_standin() -> str:
    """The stand-in's name; skips the test (fails it under CI) where no engine answers or the local
    base is missing (`tests.engines`)."""
    if not docker_answers():
        require_engine("no Docker engine answers (../shared/docker-local/docker-local up starts one)")
    if not has_image(STANDIN):
        if not has_image(LOCAL_BASE):
            require_engine(f"no {LOCAL_BASE} (../shared/docker-local/docker-local all builds it)")
        done = subprocess.run(
            ["docker", "build", "-q", "--network", "host", "--label", "clawgym.dev/test=standin", "-t", STANDIN, "-"],
            input=DOCKERFILE, capture_output=True, text=True, timeout=900,
            env={"PATH": "/usr/bin:/bin:/usr/local/bin", "DOCKER_BUILDKIT": "0"},
        )  # fmt: skip
        assert done.returncode == 0, f"building the stand-in failed: {done.stderr[-1500:]}"
    if not has_image(TB_BASE):
        subprocess.run(["docker", "tag", STANDIN, TB_BASE], check=True, capture_output=True)
    return STANDIN
