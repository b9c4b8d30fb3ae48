"""`ServiceStack`: the services mode on one machine — store, inference, proxy and orchestrator, each a
`clawgym serve X` process on a loopback port, talking gRPC, on PostgreSQL + Redis.

Owns starting the processes, waiting until each answers (the standard gRPC health service; the
proxy's /healthz), and the config that points a trainer at them (`Runtime` then opens gRPC
clients). The stack is what docker-compose runs, without Docker: `clawgym train -c run.yaml
--spawn-services` and the service-mode tests use it. Every process reads the same run config,
written to `<folder>/stack.yaml`, plus its own listen flags (`-c stack.yaml --host … --port …`);
CLAWGYM_* variables of this process are not passed on, so the file is the one source. A service's
output goes to `<folder>/<service>.log`. The stack's gRPC calls carry a secret made for it, kept in
`<folder>/rpc-secret` (mode 0600, named by `rpc.secret_file`; never in stack.yaml), and the inference
service loads checkpoints only from the trainer's `checkpoint_uri`.
"""

from __future__ import annotations

import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml

from clawgym.config import ClawgymConfig
from clawgym.errors import InvalidArgument, Unavailable
from clawgym.rpc import check_health
from clawgym.store.bus import split_prefix

CLAWGYM = Path(sys.executable).with_name("clawgym")
ORDER = ("store", "inference", "proxy", "orchestrator")


# Ports are drawn below the kernel's ephemeral range (where it picks a connection's source port):
# there a port a service will listen on, or listen on again after a restart, cannot be taken in
# the meantime by some client's connection, nor by a client of that very port connecting to itself
# while it is down. Below 30000 also keeps off Kubernetes' NodePort range.
PORTS_FROM, PORTS_BELOW = 20000, 30000
_handed_out: set[int] = set()


def ephemeral_ports() -> range:
    """The kernel's range of source ports for outgoing connections (Linux; its default elsewhere)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port(span: int = 1) -> int:
    """The first of `span` consecutive loopback ports that are free now, none handed out before by
    this process and none in the kernel's ephemeral range (services need their numbers before they
    start; an inference replica N listens on port + N)."""
    below = min(PORTS_BELOW, ephemeral_ports().start)
    if below - PORTS_FROM < 1000:  # a kernel range that covers ours leaves nothing to keep off
        below = PORTS_BELOW
    for _ in range(1000):
        port = random.randrange(PORTS_FROM, below - span + 1)
        ports = range(port, port + span)
        if all(map(_bindable, ports)):
            _handed_out.update(ports)
            return port
    raise Unavailable(f"no {span} consecutive free loopback ports in {PORTS_FROM}-{below - 1}")


def _bindable(port: int) -> bool:
    if port in _handed_out:
        return False
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class ServiceProcess:
    name: str
    port: int
    process: subprocess.Popen
    log: Path

    def tail(self, n: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-n:] if self.log.exists() else ""


class ServiceStack:
    """The four services of `cfg` as local processes; `start()` returns the config that uses them."""

    def __init__(self, cfg: ClawgymConfig, folder: Path) -> None:
        if cfg.store.url.startswith("sqlite") or cfg.store.bus_url.startswith("memory"):
            raise InvalidArgument(
                "the services mode shares state between processes: store.url must be PostgreSQL "
                f"and store.bus_url Redis (got {cfg.store.url.split('@')[-1]}, {cfg.store.bus_url})"
            )
        if not cfg.trainer.model:
            raise InvalidArgument("trainer.model: missing; the inference service serves it")
        self.cfg = cfg
        self.folder = Path(folder)
        self.ports = {name: free_port() for name in ORDER}
        self.secret_file = self.folder.resolve() / "rpc-secret"
        self.processes: list[ServiceProcess] = []

    def config(self) -> ClawgymConfig:
        """`cfg` pointed at this stack's services (the trainer's side)."""
        c, p = self.cfg, self.ports
        model = c.trainer.model
        proxy_url = f"http://127.0.0.1:{p['proxy']}"
        # the proxy's live state shares the bus's Redis, under the bus URL's key namespace (if any)
        redis, namespace = split_prefix(c.store.bus_url)
        checkpoints = c.trainer.checkpoint_uri
        if "://" not in checkpoints:  # a local folder: the inference service's root, whatever its cwd
            checkpoints = os.path.abspath(checkpoints)
        return c.model_copy(
            update={
                "store": c.store.model_copy(update={"grpc_url": f"127.0.0.1:{p['store']}"}),
                "inference": c.inference.model_copy(
                    update={
                        "grpc_url": f"127.0.0.1:{p['inference']}",
                        "model": model,
                        "checkpoint_root": checkpoints,
                    }
                ),
                "proxy": c.proxy.model_copy(
                    update={"redis_url": redis, "redis_prefix": f"{namespace}{c.proxy.redis_prefix}"}
                ),
                "orchestrator": c.orchestrator.model_copy(
                    update={"grpc_url": f"127.0.0.1:{p['orchestrator']}", "proxy_url": proxy_url}
                ),
                "rpc": c.rpc.model_copy(update={"secret_file": str(self.secret_file)}),
            }
        )

    def _argv(self, name: str, config_file: Path) -> list[str]:
        listen = ["--host", "127.0.0.1", "--port", str(self.ports[name])]
        metrics = [] if name == "proxy" else ["--metrics-port", "0"]  # the proxy serves /metrics itself
        return ["-c", str(config_file), *listen, *metrics]

    def start(self, timeout_s: float = 300.0) -> ClawgymConfig:
        """Starts every service in dependency order, each answering before the next starts."""
        cfg = self.config()
        self.folder.mkdir(parents=True, exist_ok=True)
        self._write_secret()
        config_file = self.folder / "stack.yaml"
        config_file.write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWGYM_")}
        try:
            for name in ORDER:
                log = self.folder / f"{name}.log"
                with log.open("wb") as out:
                    process = subprocess.Popen(
                        [str(CLAWGYM), "serve", name, *self._argv(name, config_file)],
                        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    )  # fmt: skip
                service = ServiceProcess(name, self.ports[name], process, log)
                self.processes.append(service)
                self._wait(service, time.monotonic() + timeout_s)
        except BaseException:
            self.stop()
            raise
        return cfg

    def _write_secret(self) -> None:
        """A fresh secret for this stack, readable by this user only."""
        self.secret_file.unlink(missing_ok=True)
        fd = os.open(self.secret_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32))

    def _wait(self, service: ServiceProcess, deadline: float) -> None:
        while time.monotonic() < deadline:
            if service.process.poll() is not None:
                raise Unavailable(
                    f"clawgym serve {service.name} exited with {service.process.returncode}:\n{service.tail()}"
                )
            if _answers(service):
                return
            time.sleep(0.3)
        raise Unavailable(
            f"clawgym serve {service.name} did not answer on :{service.port}:\n{service.tail()}"
        )

    def stop(self, grace_s: float = 15.0) -> None:
        """SIGTERM to each service, newest first; SIGKILL to what is still running after `grace_s`."""
        for service in reversed(self.processes):
            if service.process.poll() is None:
                service.process.send_signal(signal.SIGTERM)
                try:
                    service.process.wait(grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(service.process.pid, signal.SIGKILL)
                    service.process.wait()
        self.processes.clear()

    def __enter__(self) -> ServiceStack:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _answers(service: ServiceProcess) -> bool:
    """The proxy answers GET /healthz; a gRPC service's standard health service says SERVING."""
    if service.name == "proxy":
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/healthz", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False
    try:
        return check_health(f"127.0.0.1:{service.port}", timeout_s=1) == "SERVING"
    except grpc.RpcError:  # not listening yet
        return False
