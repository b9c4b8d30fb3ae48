"""The `sandbox` config section: which backend makes sandboxes, and each backend's knobs.

Per-sandbox choices (limits, mounts, lifetime) are in `SandboxSpec`; this section holds what is
fixed for a deployment (where workspaces live, which namespace and image, the warm pool, how
task images are built and named).
"""

from typing import Literal

from pydantic import Field

from clawgym.section import Section


class LocalSandboxConfig(Section):
    root_dir: str = Field(
        "", description="where workspaces live; empty = <system temp dir>/clawgym-sandboxes"
    )
    isolation: Literal["auto", "bwrap", "none"] = Field(
        "auto",
        description="bwrap: bubblewrap or fail; none: plain process groups (no isolation); "
        "auto: bubblewrap when it works here, else none with a warning. Without bubblewrap a "
        "sandbox shares this host's network (every service on it) and the backend refuses to "
        "start unless allow_unisolated is set",
    )
    allow_unisolated: bool = Field(
        False,
        description="let isolation resolve to none (tests, development): sandboxes then see the "
        "host's files and network and can reach every local service, not just the proxy",
    )
    caps: Literal["auto", "required", "off"] = Field(
        "auto",
        description="per-sandbox caps: memory_mb and processes on one cgroup (v2, or v1's memory "
        "and pids) for all of a sandbox's processes together, disk_mb as a tmpfs of that size "
        "holding its storage. auto: where this process can make them (root), else rlimits only "
        "(memory per process, processes per uid) and no disk cap, with a warning; required: or fail",
    )
    disk_mb: int = Field(
        8192,
        ge=0,
        description="disk cap of a sandbox whose Resources.disk_mb is None; 0 = none. On tmpfs, "
        "what a sandbox writes also counts against its memory cap",
    )
    uid_base: int = Field(
        1_800_000_000,
        description="when run as root, each sandbox runs as its own unprivileged uid from "
        "[uid_base, uid_base + uid_count) (appears as root inside), so limits and files never mix",
    )
    uid_count: int = Field(
        65536, ge=1, description="size of the uid range (at most this many live sandboxes)"
    )
    system_paths: list[str] = Field(
        default_factory=lambda: [
            "/usr",
            "/bin",
            "/sbin",
            "/lib",
            "/lib32",
            "/lib64",
            "/libx32",
            "/etc",
            "/opt",
            "/var",
            "/srv",
        ],
        description="host paths visible read-only at the same place (symlinks are recreated as symlinks)",
    )
    ro_paths: list[str] = Field(
        # harness CLIs, and the tasks' provisioned setup steps (pytest, pip targets) the verifiers use
        default_factory=lambda: ["~/.cache/clawgym/harnesses", "~/.cache/clawgym/provision"],
        description="more host paths visible read-only at the same place, e.g. installed harness CLIs; "
        "missing ones are skipped; ~ is the host user's home (hidden otherwise)",
    )


class KubernetesSandboxConfig(Section):
    namespace: str = Field("default", description="namespace of the sandbox pods")
    kubeconfig: str = Field(
        "", description="kubeconfig file; empty = $KUBECONFIG / ~/.kube/config, else in-cluster"
    )
    context: str = Field("", description="kubeconfig context; empty = current")
    image: str = Field("localhost/python-node:bookworm", description="image when the spec names none")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy"
    )
    host_network: bool = Field(
        False,
        description="run pods with hostNetwork (reach a proxy on the node's 127.0.0.1); "
        "NetworkPolicy does not apply to such pods",
    )
    warm_pool: int = Field(0, ge=0, description="pods kept started ahead, per distinct pod shape; 0 = off")
    request_fraction: float = Field(
        0.25, gt=0, le=1, description="resource requests = limits x this (lets the scheduler overcommit)"
    )
    start_timeout_s: float = Field(180.0, gt=0, description="pod created -> Running, or SandboxFailed")
    drop_capabilities: list[str] = Field(default_factory=lambda: ["ALL"], description="securityContext drop")
    add_capabilities: list[str] = Field(
        default_factory=lambda: ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"],
        description="securityContext add (enough for package managers run as root; NET_RAW stays dropped)",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="pod nodeSelector")
    max_threads: int = Field(128, ge=4, description="threads for blocking API calls and exec streams")
    name_prefix: str = Field("clawgym-sbx", description="pod name prefix")
    task_images: bool = Field(
        False,
        description="run a task that has its own Dockerfile in its image, named as the docker "
        "backend names it (<task_image_registry>/<image_repository>/<suite>/<task>:<content hash>); "
        "the image must be pushed there first. Off: the task runs in `image` with host setup steps",
    )
    task_image_registry: str = Field(
        "", description="registry prefix of task images (e.g. registry.example.com:5000); empty = none"
    )
    image_repository: str = Field("clawgym-task", description="as sandbox.docker.image_repository")
    owner_lease_s: float = Field(
        60.0,
        ge=5,
        description="each orchestrator process renews a Lease (coordination.k8s.io, in `namespace`) "
        "every third of this; one not renewed for this long is gone, and `reap` deletes the sandbox "
        "pods it left. Needs get/list/create/patch/delete on leases (the chart's Role has them); "
        "without, a process's pods are left to their activeDeadlineSeconds",
    )


class DockerSandboxConfig(Section):
    cli: str = Field("docker", description="the Docker CLI (a name on PATH or a path)")
    host: str = Field(
        "", description="DOCKER_HOST for the CLI (e.g. unix:///run/docker.sock); empty = the CLI's default"
    )
    image: str = Field(
        "python:3.12-slim",
        description="image of a sandbox whose task has no image of its own (and the spec names none)",
    )
    relay_image: str = Field(
        "python:3.12-slim",
        description="image with python3 that opens a sandbox's way to the proxy: it joins the "
        "sandbox's network namespace for a moment, binds the proxy's port on its 127.0.0.1 and "
        "hands the socket to the backend (`sandbox/relay.py`); nothing of it runs in the sandbox",
    )
    image_repository: str = Field(
        "clawgym-task",
        description="task images are named <image_repository>/<suite>/<task>:<content hash> (the "
        "suite's name keeps two suites' tasks of one id apart)",
    )
    build_args: dict[str, str] = Field(
        default_factory=dict, description="--build-arg NAME=VALUE for every task image build"
    )
    build_network: str = Field(
        "",
        description="--network of task image builds that may use one (e.g. host); empty = the "
        "engine's default, the bridge: the internet and every service on this host's bridge address",
    )
    allow_imported_build_network: bool = Field(
        False,
        description="let the Dockerfiles of imported suites (`clawgym tasks import`: a third party's) "
        "build with build_network. Off: they build with --network none, so their RUN steps reach "
        "nothing (a step that downloads fails: turn this on for a suite you trust, or build its "
        "images yourself). A suite named by its folder is its author's and builds with build_network",
    )
    build_timeout_s: float = Field(1800.0, gt=0, description="one task image build, or SandboxFailed")
    remove_replaced_images: bool = Field(
        True,
        description="after building a task's image, remove its images of older contents (the ones "
        "no container uses; the engine refuses the rest)",
    )
    disk_quota: Literal["auto", "required", "off"] = Field(
        "auto",
        description="Resources.disk_mb as --storage-opt size= on the container's filesystem, which "
        "only overlay2 on xfs with pquota (or btrfs, zfs) supports. auto: used where the engine "
        "accepts it, else no disk cap with a warning; required: or fail",
    )
    add_capabilities: list[str] = Field(
        default_factory=lambda: [
            *("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"),
            "NET_BIND_SERVICE",
        ],
        description="capabilities kept, all others dropped (NET_RAW, MKNOD, ...): enough for package "
        "managers run as root and a task's server on a low port",
    )
    ro_paths: list[str] = Field(
        default_factory=lambda: ["~/.cache/clawgym/harnesses", "~/.cache/clawgym/provision"],
        description="host paths bound read-only at the same place in every sandbox: installed "
        "harness CLIs and the provisioned pytest; missing ones are skipped; ~ is this user's home",
    )
    state_dir: str = Field(
        "", description="where relay sockets live; empty = <system temp dir>/clawgym-docker"
    )
    name_prefix: str = Field("clawgym-sbx", description="container name prefix")


class SandboxConfig(Section):
    backend: Literal["local", "kubernetes", "docker"] = Field("local", description="where sandboxes run")
    owner: str = Field(
        "",
        description="label on everything this process creates, beside an instance label of the "
        "process's own; `reap` deletes what the owner's gone instances left, never a live one's "
        "(liveness: lock files of local and docker; Leases on kubernetes, where a configured owner's "
        "other instances count as gone at its start). Keep it stable across restarts (e.g. the "
        "orchestrator's pod name) and give each live orchestrator its own: the store takes a "
        "configured owner's predecessor's unended rollouts at once. Empty = the host "
        "name, shared by the host's processes: each has a lease of its own, and a dead one's "
        "rollouts are taken once its lease (orchestrator.lease_s) runs out",
    )
    max_output_bytes: int = Field(
        16 << 20, ge=1024, description="stdout/stderr kept per exec; the rest is dropped"
    )
    max_get_bytes: int = Field(512 << 20, ge=1024, description="largest tar get_tar returns")
    relay_max_connections: int = Field(
        64,
        ge=1,
        description="connections one sandbox may hold open to the proxy at once, all its execs "
        "together (local and docker backends, whose relay runs in this process; kubernetes pods "
        "dial the proxy themselves). One beyond is reset as soon as it is accepted, and refusals "
        "are logged with counts at most every 10 s per sandbox. Each relayed connection costs this "
        "process two file descriptors: keep this x concurrent sandboxes x 2 under its RLIMIT_NOFILE",
    )
    local: LocalSandboxConfig = Field(default_factory=LocalSandboxConfig, description="local backend")
    kubernetes: KubernetesSandboxConfig = Field(
        default_factory=KubernetesSandboxConfig, description="kubernetes backend"
    )
    docker: DockerSandboxConfig = Field(default_factory=DockerSandboxConfig, description="docker backend")

    def with_ro_paths(self, paths: list[str]) -> "SandboxConfig":
        """This section with `paths` added (once) to what local and docker sandboxes see read-only."""

        def extended(ro: list[str]) -> list[str]:
            return [*ro, *(p for p in paths if p not in ro)]

        local = self.local.model_copy(update={"ro_paths": extended(self.local.ro_paths)})
        docker = self.docker.model_copy(update={"ro_paths": extended(self.docker.ro_paths)})
        return self.model_copy(update={"local": local, "docker": docker})

    @property
    def task_images(self) -> bool:
        """Whether the backend runs a task that has its own image in that image (`Task.unsupported_by`)."""
        return self.backend == "docker" or (self.backend == "kubernetes" and self.kubernetes.task_images)
