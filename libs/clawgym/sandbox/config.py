"""The `sandbox` config section: which backend makes sandboxes, and each backend's knobs.

Per-sandbox choices (limits, mounts, lifetime) are in `SandboxSpec`; this section holds what is
fixed for a deployment (where workspaces live, which namespace and image, the warm pool).
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


class SandboxConfig(Section):
    backend: Literal["local", "kubernetes"] = Field("local", description="where sandboxes run")
    owner: str = Field(
        "",
        description="label on everything this process creates; `reap` deletes an owner's leftovers. "
        "Keep it stable across restarts (e.g. the orchestrator's pod name); empty = host name",
    )
    max_output_bytes: int = Field(
        16 << 20, ge=1024, description="stdout/stderr kept per exec; the rest is dropped"
    )
    max_get_bytes: int = Field(512 << 20, ge=1024, description="largest tar get_tar returns")
    local: LocalSandboxConfig = Field(default_factory=LocalSandboxConfig, description="local backend")
    kubernetes: KubernetesSandboxConfig = Field(
        default_factory=KubernetesSandboxConfig, description="kubernetes backend"
    )
