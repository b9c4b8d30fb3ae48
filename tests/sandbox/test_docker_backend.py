"""The docker sandbox backend on the real engine (../shared/docker-local): a Terminal-Bench task in
its own image (oracle passes, nop fails), the image cache, teardown, limits and network isolation.

No registry answers here, so the task's `FROM` (Terminal-Bench's python base) is a local stand-in
built FROM `localhost/debian:bookworm` with python3 and tagged with that name, once per machine;
the backend itself builds as on any machine (a user's pulls the real base).
"""

import asyncio
import ipaddress
import json
import secrets
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from clawgym.harnesses.pseudo import Oracle
from clawgym.orchestrator.attempt import image_fields, run_task
from clawgym.orchestrator.check import check_task
from clawgym.sandbox import (
    DockerSandboxConfig,
    ImageBuild,
    Resources,
    SandboxConfig,
    SandboxFailed,
    SandboxSpec,
)
from clawgym.sandbox.docker import DockerBackend
from clawgym.tasks.loader import load_task
from clawgym.tasks.provision import Provisioner
from clawgym.tasks.suite_import import plan_import, write_suite
from tests.sandbox.docker_standin import STANDIN, ensure_standin, has_image
from tests.sandbox.killed_owner import sandbox_of_a_killed_process

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
TASK = REPO / "tests" / "tasks" / "data" / "terminal-bench" / "build-sum-tool"
ROLLOUT = "clawgym.dev/rollout"


def docker(*args: str, check: bool = True, timeout: float = 600) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check:
        assert done.returncode == 0, f"docker {' '.join(args[:3])} failed: {done.stderr[-1500:]}"
    return done.stdout


def containers(label: str) -> list[str]:
    return docker("ps", "--all", "--filter", f"label={label}", "--format", "{{.Names}}").split()


@pytest.fixture(scope="session")
def standin() -> str:
    return ensure_standin()


@pytest.fixture
def make_backend(standin: str, tmp_path: Path) -> Iterator[Callable[..., DockerBackend]]:
    """Docker backends with a fresh owner each (so reap never touches anyone else's containers)."""
    owner = f"test-{secrets.token_hex(4)}"
    made: list[DockerBackend] = []

    def make(**docker_cfg) -> DockerBackend:
        fields = {
            "image": standin,
            "relay_image": standin,
            "state_dir": str(tmp_path / "state"),
            **docker_cfg,
        }
        cfg = DockerSandboxConfig(**fields)
        backend = DockerBackend(SandboxConfig(backend="docker", owner=owner, docker=cfg))
        made.append(backend)
        return backend

    yield make
    leftovers = containers(f"clawgym.dev/owner={owner}")
    if leftovers:
        docker("rm", "--force", *leftovers, check=False)
    assert not leftovers, f"a test left containers behind: {leftovers}"


def tiny_task(tmp_path: Path, solution: str, marker: str = "") -> Path:
    """A Terminal-Bench task FROM the stand-in that builds in a second (`marker` makes it new)."""
    task = tmp_path / "tiny-task"
    (task / "tests").mkdir(parents=True)
    (task / "task.yaml").write_text("instruction: write /app/out.txt\nmax_agent_timeout_sec: 300\n")
    (task / "Dockerfile").write_text(f"FROM {STANDIN}\nWORKDIR /app\nRUN echo '{marker}' > /app/marker\n")
    (task / "solution.sh").write_text(f"#!/bin/bash\n{solution}\n")
    (task / "tests" / "test_out.py").write_text(
        "from pathlib import Path\n\ndef test_out():\n    assert Path('/app/out.txt').read_text() == 'ok\\n'\n"
    )
    return task


# --- the task in its own image ---


def test_a_terminal_bench_task_with_its_own_dockerfile_passes_with_oracle_and_fails_with_nop(make_backend):
    """The Dockerfile builds the task's data and tool (a RUN the local backend refuses); in its
    image the oracle's solution uses them and passes, and doing nothing fails."""
    task = load_task(TASK)
    assert task.unsupported and "not a package install" in task.unsupported, "local sandboxes refuse it"
    backend = make_backend()

    async def scenario():
        try:
            return await check_task(task, backend, Provisioner())
        finally:
            await backend.close()

    check = asyncio.run(scenario())
    assert check.error is None, f"the docker backend runs the task: {check.error}"
    assert check.oracle is not None and check.oracle.verdict.reward == 1.0, (
        f"the oracle passes in the task's image: {check.oracle.verdict.detail if check.oracle else ''}"
        f" | harness: {check.oracle.harness_output if check.oracle else ''}"
    )
    assert check.nop is not None and not check.nop.verdict.passed, (
        f"nop fails: {check.nop.verdict.detail if check.nop else ''}"
    )
    assert check.ok
    assert check.nop.verdict.reward == 0.5 and "1/2 tests passed" in check.nop.verdict.detail, (
        "under nop the image's own built data is there (one test passes), only the answer is missing"
    )


def test_clawgym_tasks_check_runs_a_suite_in_the_docker_backend(standin, tmp_path):
    """What a user runs to check such a suite: `clawgym tasks check SUITE --backend docker`."""
    from typer.testing import CliRunner

    from clawgym_app.cli import app

    suite = tmp_path / "suite"
    shutil.copytree(TASK, suite / TASK.name)
    result = CliRunner().invoke(app, ["tasks", "check", str(suite), "--backend", "docker", "--json"])
    lines = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    summary = lines[-1] if lines else {}
    figures = {key: summary.get(key) for key in ("tasks", "oracle_passed", "nop_failed", "errors")}
    assert figures == {"tasks": 1, "oracle_passed": 1, "nop_failed": 1, "errors": 0}, result.output
    assert result.exit_code == 0, "every task checked out"
    local = CliRunner().invoke(app, ["tasks", "check", str(suite), "--json"])
    assert "not a package install" in local.output and local.exit_code == 1, (
        "the local backend still refuses it, saying why"
    )


def test_the_reference_harness_solves_the_task_in_its_image_through_the_relay(make_backend):
    """The agent's script is put into the container and run by the image's python3; its model calls
    reach the (scripted) proxy on this host only through the relay, carrying the rollout token."""
    from clawgym.harnesses.registry import get_harness
    from tests.harnesses.conftest import ScriptedChatServer

    task = load_task(TASK)
    backend = make_backend()
    with ScriptedChatServer() as server:
        server.replies = ["```bash\nsumlines numbers.txt > answer.txt\n```", "DONE"]

        async def scenario():
            try:
                return await run_task(
                    get_harness("reference"),
                    task,
                    backend,
                    proxy_url=server.url,
                    token="tok-7",
                    model="policy",
                )
            finally:
                await backend.close()

        outcome = asyncio.run(scenario())
    assert outcome.verdict.passed, f"verifier: {outcome.verdict.detail}\n{outcome.harness_output}"
    assert len(server.requests) == 2 and server.headers[0]["authorization"] == "Bearer tok-7"
    assert "exit code 0" in server.requests[1]["messages"][-1]["content"], (
        "the image's tool ran in the container's workdir"
    )


# --- the image cache ---


def test_an_unchanged_task_image_is_built_once_even_for_concurrent_rollouts(make_backend, tmp_path):
    task = tiny_task(tmp_path, "echo ok > /app/out.txt", marker=secrets.token_hex(8))
    build = ImageBuild(str(task / "Dockerfile"), str(task), name="cache-test")
    spec = SandboxSpec(workdir="/app", build=build, network="none")
    first = make_backend()

    async def create_three(backend: DockerBackend) -> list[str]:
        sandboxes = await asyncio.gather(*(backend.create(spec) for _ in range(3)))
        try:
            return [(await s.get_file("/app/marker")).decode() for s in sandboxes] + [sandboxes[0].image]
        finally:
            await backend.close()

    *markers, image = asyncio.run(create_three(first))
    try:
        assert first.images.builds == 1, (
            f"three concurrent rollouts of one new task build once: {first.images.builds}"
        )
        assert len(set(markers)) == 1 and markers[0].strip(), "each sandbox runs the built image"
        built_id = docker("image", "inspect", "--format", "{{.Id}}", image).strip()
        second = make_backend()  # a new process, as far as the cache is concerned
        *_, again = asyncio.run(create_three(second))
        assert second.images.builds == 0, "an unchanged task is never rebuilt"
        assert again == image and docker("image", "inspect", "--format", "{{.Id}}", image).strip() == built_id
        (task / "solution.sh").write_text("#!/bin/bash\necho changed\n")
        third = make_backend()
        *_, changed = asyncio.run(create_three(third))
        assert third.images.builds == 1 and changed != image, "a changed context is a new image"
        assert not has_image(image), "the image of the old content was removed once replaced"
    finally:
        docker("image", "rm", "--force", image, check=False)
        docker(
            "image",
            "rm",
            "--force",
            *docker("image", "ls", "-q", "clawgym-task/cache-test").split(),
            check=False,
        )


def bridge_gateway() -> str:
    """The host's side of the default bridge (docker0): what a container reaches the host at."""
    ipam = json.loads(docker("network", "inspect", "bridge", "--format", "{{json .IPAM.Config}}"))[0]
    return ipam.get("Gateway") or str(next(ipaddress.ip_network(ipam["Subnet"]).hosts()))


def imported(tmp_path: Path, suite: str, dockerfile: str, marker: str) -> ImageBuild:
    """`tiny_task` with `dockerfile`, imported as the suite `suite` (as `clawgym tasks import` does):
    the build the orchestrator's attempt makes of the task loaded from the suite."""
    source = tmp_path / f"{suite}-source"
    (tiny_task(source, "echo ok > /app/out.txt", marker) / "Dockerfile").write_text(dockerfile)
    info = write_suite(plan_import(source), root=tmp_path / "suites", name=suite)
    task = load_task(info.path / "tiny-task")
    assert task.image is not None, "test setup: the task has its own image"
    return image_fields(task, task.image)["build"]


def test_an_imported_suites_dockerfile_builds_without_network_unless_allowed(make_backend, tmp_path):
    """A RUN step of a task's Dockerfile reached a listener on this host's bridge address: builds
    had the engine's default network. An imported suite's Dockerfile (a third party's) now builds
    with --network none: the step cannot connect and the build fails saying so. With
    `allow_imported_build_network` it builds with the network, and the listener sees the step (so
    the probe can tell)."""
    gateway, token = bridge_gateway(), secrets.token_hex(8)
    listener = socket.socket()
    listener.bind((gateway, 0))  # the host side of docker0: never an external address
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    reach = f"import socket; socket.create_connection(({gateway!r}, {port}), timeout=5).sendall(b'{token}')"
    build = imported(tmp_path, "third-party", f'FROM {STANDIN}\nRUN python3 -c "{reach}"\n', token)
    assert build.imported and build.suite == "third-party", f"the attempt builds it as imported: {build}"
    name = ""
    try:
        with pytest.raises(SandboxFailed, match="built without network"):
            asyncio.run(make_backend().images.ensure(build))
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing connected: the build could not reach the host
        name = asyncio.run(make_backend(allow_imported_build_network=True).images.ensure(build))
        conn, _ = listener.accept()
        conn.settimeout(10)
        assert conn.recv(64) == token.encode(), "allowed, the build reaches the host: the probe works"
        conn.close()
    finally:
        listener.close()
        if name:
            docker("image", "rm", "--force", name, check=False)


def test_two_suites_tasks_of_one_id_get_images_that_survive_each_others_builds(make_backend, tmp_path):
    """Two suites each hold a task `tiny-task` with its own Dockerfile. Images were named by task id
    alone, so building one removed the other's as replaced, on every build. Named by suite and id,
    each build keeps the other's image: three ensures, two builds."""
    token = secrets.token_hex(8)
    first = imported(tmp_path, "suite-a", f"FROM {STANDIN}\nRUN echo a-{token} > /marker\n", token)
    second = imported(tmp_path, "suite-b", f"FROM {STANDIN}\nRUN echo b-{token} > /marker\n", token)
    backend = make_backend()

    async def build_both_then_first_again() -> list[str]:
        return [await backend.images.ensure(b) for b in (first, second, first)]

    a, b, a_again = asyncio.run(build_both_then_first_again())
    try:
        assert a.rpartition(":")[0] != b.rpartition(":")[0], f"one repository per suite and task: {a} {b}"
        assert has_image(a) and has_image(b), "each suite's image survives the other's build"
        assert a_again == a and backend.images.builds == 2, (
            f"the first suite's image was still there, not rebuilt: {backend.images.builds} builds"
        )
    finally:
        docker("image", "rm", "--force", a, b, check=False)


# --- teardown ---


def test_no_container_is_left_after_a_run_or_a_cancelled_one(make_backend, tmp_path):
    backend = make_backend()
    task = load_task(tiny_task(tmp_path, "sleep 300", marker="teardown"))
    run_label = f"{ROLLOUT}=teardown-{secrets.token_hex(4)}"

    async def scenario() -> list[str]:
        attempt = asyncio.ensure_future(
            run_task(Oracle(), task, backend, labels={ROLLOUT: run_label.split("=")[1]})
        )
        seen: list[str] = []
        for _ in range(600):
            seen = containers(run_label)
            if seen:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # the solution is sleeping in it now
        attempt.cancel()
        with pytest.raises(asyncio.CancelledError):
            await attempt
        await backend.close()
        return seen

    seen = asyncio.run(scenario())
    assert seen, "the rollout's container carried its rollout label while it ran"
    assert containers(run_label) == [], "a cancelled rollout's container is removed before the cancel returns"

    done_label = f"{ROLLOUT}=done-{secrets.token_hex(4)}"
    finished = load_task(tiny_task(tmp_path / "ok", "echo ok > /app/out.txt", marker="teardown"))

    async def a_run():
        try:
            return await run_task(Oracle(), finished, backend, labels={ROLLOUT: done_label.split("=")[1]})
        finally:
            await backend.close()

    assert asyncio.run(a_run()).verdict.passed
    assert containers(done_label) == [], "a finished rollout leaves no container"


def test_reap_removes_the_owners_stale_containers_and_nobody_elses(make_backend, standin):
    backend = make_backend()
    labels = [
        "--label",
        "app.kubernetes.io/managed-by=clawgym",
        "--label",
        f"clawgym.dev/owner={backend.owner}",
    ]
    other = ["--label", "app.kubernetes.io/managed-by=clawgym", "--label", "clawgym.dev/owner=someone-else"]
    stale = f"clawgym-stale-{secrets.token_hex(4)}"
    theirs = f"clawgym-theirs-{secrets.token_hex(4)}"
    docker("run", "-d", "--name", stale, *labels, "--network", "none", standin, "sleep", "300")
    docker("run", "-d", "--name", theirs, *other, "--network", "none", standin, "sleep", "300")
    try:

        async def scenario() -> tuple[int, list[str]]:
            live = await backend.create(SandboxSpec(workdir="/app", network="none"))
            try:
                reaped = await backend.reap()
                left = containers(f"clawgym.dev/owner={backend.owner}")
                assert live.id in left, "reap keeps what this backend holds"
                return reaped, left
            finally:
                await backend.close()

        reaped, left = asyncio.run(scenario())
        assert reaped == 1 and stale not in left, "the crashed predecessor's container is removed"
        assert len(left) == 1, f"the sandbox this backend holds is kept: {left}"
        assert theirs in containers("clawgym.dev/owner=someone-else"), (
            "another owner's running container stays"
        )
    finally:
        docker("rm", "--force", stale, theirs, check=False)


def test_reap_keeps_a_live_peers_containers_of_the_same_owner_and_takes_a_killed_ones(
    make_backend, standin, tmp_path
):
    """Two orchestrators with one owner (the default: the host name): the second's reap used to
    remove the first's live sandbox mid-rollout (its harness killed, exit 137). Each backend is now
    an instance of the owner, and reap takes only what a gone instance left: a live peer's container
    keeps running and serving, while the container of a process killed -9 is removed."""
    peer, second = make_backend(), make_backend()
    assert peer.owner == second.owner and peer.instance != second.instance, "one owner, two instances"
    state = str(tmp_path / "state")
    killed = sandbox_of_a_killed_process(
        {
            "backend": "docker",
            "owner": peer.owner,
            "docker": {"image": standin, "relay_image": standin, "state_dir": state},
        }
    )
    assert killed in containers(f"clawgym.dev/owner={peer.owner}"), "test setup: the killed process's sandbox"

    async def scenario():
        live = await peer.create(SandboxSpec(workdir="/app", network="none"))
        try:
            await live.put_file("/app/state.txt", b"mid-rollout\n")
            reaped = await second.reap()
            return reaped, await live.exec("cat /app/state.txt")
        finally:
            await peer.close()
            await second.close()

    reaped, after = asyncio.run(scenario())
    assert after.stdout == b"mid-rollout\n", f"the live peer's container is intact and serving: {after}"
    assert killed not in containers(f"clawgym.dev/owner={peer.owner}"), "the killed process's is reaped"
    assert reaped == 1, f"only the dead instance's container is taken: reaped {reaped}"


# --- limits and network ---


def test_resources_become_the_containers_limits(make_backend):
    backend = make_backend()
    resources = Resources(cpus=0.5, memory_mb=256, processes=64, open_files=1024, disk_mb=100)

    async def scenario():
        sandbox = await backend.create(SandboxSpec(workdir="/app", resources=resources, network="none"))
        try:
            config = json.loads(docker("inspect", sandbox.id))[0]["HostConfig"]
            over = await sandbox.exec(
                ["python3", "-c", "b = bytearray(400 << 20); print(len(b))"], timeout_s=60
            )
            # holds every pid it can get until the timeout, so even the kill needs room (docker update)
            fork_bomb = await sandbox.exec("for i in $(seq 200); do sleep 60 & done; wait", timeout_s=3)
            await sandbox.reset_dir("/tmp")  # kills what the fork bomb left
            slow = await sandbox.exec("setsid sleep 301 & sleep 302", timeout_s=1)
            left = await sandbox.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
            return config, fork_bomb, over, slow, left.stdout.decode()

        finally:
            await backend.close()

    config, fork_bomb, over, slow, left = asyncio.run(scenario())
    assert config["Memory"] == 256 << 20 and config["MemorySwap"] == 256 << 20, "memory_mb, no swap beyond"
    assert config["NanoCpus"] == 500_000_000 and config["PidsLimit"] == 64
    assert {"Name": "nofile", "Hard": 1024, "Soft": 1024} in config["Ulimits"]
    assert config["CapDrop"] == ["ALL"] and "NET_RAW" not in config["CapAdd"]
    assert config["NetworkMode"] == "none"
    assert b"Resource temporarily unavailable" in fork_bomb.stderr or b"Cannot fork" in fork_bomb.stderr, (
        f"processes caps the container's pids: {fork_bomb}"
    )
    assert over.exit_code == 137, f"a process over memory_mb is OOM-killed: {over}"
    assert slow.timed_out and "sleep 30" not in left, (
        f"a timeout kills every process the exec started, the one that left its session too: {left}"
    )
    if backend.disk_quota:
        assert config["StorageOpt"] == {"size": "100m"}, "disk_mb caps the container's filesystem"
    else:  # overlay2 on extfs (this machine): the engine refuses --storage-opt size=
        assert backend.disk_quota is False and not config.get("StorageOpt"), "no cap, and a warning"


PROBE = r"""
import json, socket, sys, urllib.request
proxy, host_port, gateway = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {"proxy": urllib.request.urlopen(proxy + "/healthz", timeout=5).read().decode()}
def reach(host, port):
    try:
        socket.create_connection((host, port), timeout=3).close()
        return "reached"
    except OSError as e:
        return type(e).__name__
out["host_loopback"] = reach("127.0.0.1", host_port)
out["gateway"] = reach(gateway, host_port)
try:
    socket.getaddrinfo("deb.debian.org", 80)
    out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
print(json.dumps(out))
"""


def test_the_agent_reaches_the_proxy_and_nothing_else(make_backend, standin):
    """The proxy (on this host's loopback) answers through the relay; the host's other ports (on
    its loopback and on the bridge gateway), and DNS, are unreachable. A control container on the
    default bridge reaches the gateway port, so the probe can tell."""
    gateway = bridge_gateway()
    backend = make_backend()

    async def scenario():
        async def proxy(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 8\r\nconnection: close\r\n\r\nproxy-ok")
            await writer.drain()
            writer.close()

        async def other(reader, writer):
            writer.close()

        proxy_server = await asyncio.start_server(proxy, "127.0.0.1", 0)
        other_server = await asyncio.start_server(other, "0.0.0.0", 0)  # every host address
        proxy_url = f"http://127.0.0.1:{proxy_server.sockets[0].getsockname()[1]}"
        other_port = other_server.sockets[0].getsockname()[1]
        try:
            sandbox = await backend.create(SandboxSpec(workdir="/app", proxy_url=proxy_url))
            inside = backend.sandbox_proxy_url(proxy_url)
            probe = await sandbox.exec(
                ["python3", "-c", PROBE, inside, str(other_port), gateway], timeout_s=60
            )
            control = await asyncio.to_thread(
                docker, "run", "--rm", "--network", "bridge", standin, "python3", "-c",
                f"import socket; socket.create_connection(({gateway!r}, {other_port}), timeout=5); print('reached')",
            )  # fmt: skip
            labels = json.loads(docker("inspect", sandbox.id))[0]["Config"]["Labels"]
            return probe, control, labels
        finally:
            await backend.close()
            proxy_server.close()
            other_server.close()

    probe, control, labels = asyncio.run(scenario())
    assert probe.exit_code == 0, f"the probe ran: {probe}"
    seen = json.loads(probe.stdout.decode().splitlines()[-1])
    assert seen["proxy"] == "proxy-ok", f"the proxy answers through the relay: {seen}"
    assert seen["host_loopback"] != "reached", "the host's loopback services are not the sandbox's"
    assert seen["gateway"] != "reached", f"the host is unreachable over the bridge: {seen}"
    assert seen["dns"] != "resolved", "no name resolves: no way out"
    assert control.strip() == "reached", "the control container reaches the port, so the probe can tell"
    assert labels["clawgym.dev/egress"] == "proxy" and labels["clawgym.dev/owner"] == backend.owner


def test_a_dead_relay_image_fails_the_sandbox_and_leaves_nothing(make_backend):
    backend = make_backend(relay_image="clawgym-test/no-such-image:0")

    async def scenario():
        try:
            await backend.create(SandboxSpec(workdir="/app", proxy_url="http://127.0.0.1:9"))
        finally:
            await backend.close()

    from clawgym.sandbox import SandboxFailed

    with pytest.raises(SandboxFailed, match="relay helper"):
        asyncio.run(scenario())
    assert containers(f"clawgym.dev/owner={backend.owner}") == [], "the half-made sandbox is removed"


def test_a_prebuilt_image_that_cannot_be_pulled_fails_the_sandbox_saying_so(make_backend):
    """A task's prebuilt image (Harbor's docker_image) is pulled as `docker run` would; no registry
    answers here, so the pull fails, as an infrastructure failure naming it."""
    from clawgym.sandbox import SandboxFailed

    backend = make_backend()

    async def scenario():
        try:
            await backend.create(
                SandboxSpec(workdir="/app", image="clawgym-test/no-such-image:0", network="none")
            )
        finally:
            await backend.close()

    with pytest.raises(SandboxFailed, match="pulling clawgym-test/no-such-image:0"):
        asyncio.run(scenario())
