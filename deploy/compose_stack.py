"""Drives the docker-compose deployment for its test and benchmark: up, a training run with crashes, checks.

    stack = ComposeStack(project="clawgym-test", run_config="tests/deploy/compose_run.yaml", local=True)
    stack.up()                        # every service healthy (the trainer starts the run)
    run = stack.follow_run(crash=["proxy", "store"])   # until the trainer exits; crashes on the way
    stack.down()

`follow_run` watches the run through PostgreSQL (published port) and crashes the named services one
after the other once a step has been trained: SIGKILL to the container's first process from the
host, as the kernel's OOM killer would (Docker counts `docker kill` as a manual stop and never
restarts it; a crash is what `restart:` is for). The `RunFacts` it returns are what the run left in
PostgreSQL, Redis, the inference service's log and Prometheus, so the test asserts on them and the
benchmark prints them. The panel check evaluates every panel query of deploy/grafana/dashboards
over the run's time range through Prometheus's HTTP API.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DASHBOARDS = REPO / "deploy" / "grafana" / "dashboards"

# Published host ports of a test stack, away from the defaults a developer's own stack uses.
TEST_PORTS = {
    "CLAWGYM_PG_PORT": 25432,
    "CLAWGYM_REDIS_PORT": 26379,
    "CLAWGYM_STORE_PORT": 25051,
    "CLAWGYM_INFERENCE_PORT": 25052,
    "CLAWGYM_ORCHESTRATOR_PORT": 25053,
    "CLAWGYM_TRAINER_PORT": 25054,
    "CLAWGYM_PROXY_PORT": 28080,
    "CLAWGYM_PROMETHEUS_PORT": 29090,
    "CLAWGYM_GRAFANA_PORT": 23000,
}
# The credentials docker-compose.yml reads; a test stack makes its own rather than the development defaults.
CREDENTIALS = ("CLAWGYM_RPC_SECRET", "CLAWGYM_REDIS_PASSWORD", "CLAWGYM_DB_PASSWORD", "CLAWGYM_PG_ADMIN_PASSWORD")  # fmt: skip
ACK = re.compile(r"clawgym\.proxy\.acks: recorded (\S+)#(\d+) (\w+)")
LOADED = re.compile(r"policy version (\d+) loaded from")


class ComposeError(RuntimeError):
    pass


@dataclass
class RunFacts:
    """What a compose training run left behind."""

    trainer_exit: int | None = None
    steps: int = 0  # train steps recorded by the trainer
    checkpoints: list[int] = field(default_factory=list)
    versions_served: list[int] = field(default_factory=list)  # LoadWeights the inference service logged
    calls: int = 0
    rollouts: dict[str, int] = field(default_factory=dict)  # status → count
    groups: int = 0
    groups_consumed: int = 0
    groups_announced: int = 0  # entries of the bus's groups.ready stream in Redis
    pass_at_1: dict[str, float] = field(default_factory=dict)  # harness → the final evaluation's Pass@1
    acked_calls: int = 0  # calls the proxy logged as recorded, over all its lives
    calls_lost: int = 0  # of those, missing from PostgreSQL
    crashed: list[str] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0


class ComposeStack:
    """One compose project from this repository's files, addressed by its published ports."""

    def __init__(
        self, project: str, run_config: str | Path, *, local: bool, ports: dict[str, int] | None = None
    ) -> None:
        self.project = project
        self.files = ["docker-compose.yml"] + (["deploy/compose/local.yml"] if local else [])
        self.ports = dict(TEST_PORTS if ports is None else ports)
        config = Path(run_config)
        # fresh credentials, unless the caller's environment sets them
        self.env = {
            **{name: secrets.token_hex(16) for name in CREDENTIALS},
            **os.environ,
            **{k: str(v) for k, v in self.ports.items()},
            "CLAWGYM_RUN_CONFIG": str(config if config.is_absolute() else REPO / config),
        }

    # --- compose ---

    def compose(self, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        argv = ["docker", "compose", "-p", self.project]
        for f in self.files:
            argv += ["-f", str(REPO / f)]
        done = subprocess.run(
            [*argv, *args], cwd=REPO, env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and done.returncode != 0:
            raise ComposeError(
                f"docker compose {' '.join(args)} exited {done.returncode}:\n{done.stderr[-4000:]}"
            )
        return done

    def up(self, timeout_s: float = 900) -> float:
        """Starts every service and waits until all are healthy; returns the seconds it took."""
        started = time.monotonic()
        try:
            self.compose(
                "up",
                "-d",
                "--no-build",
                "--wait",
                "--wait-timeout",
                str(int(timeout_s)),
                timeout=timeout_s + 60,
            )
        except ComposeError as e:
            raise ComposeError(f"{e}\n--- service logs ---\n{self.logs(tail=40)}") from e
        return time.monotonic() - started

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", check=False)

    def logs(self, *services: str, tail: int | None = None) -> str:
        args = ["logs", "--no-color"] + (["--tail", str(tail)] if tail else []) + list(services)
        return self.compose(*args, check=False).stdout

    def container(self, service: str) -> str:
        """The id of the service's container (running or exited)."""
        out = self.compose("ps", "-a", "-q", service).stdout.split()
        if not out:
            raise ComposeError(f"no container for service {service}")
        return out[0]

    def inspect(self, service: str, template: str) -> str:
        done = subprocess.run(["docker", "inspect", "-f", template, self.container(service)],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout.strip()

    def running(self) -> list[str]:
        """Containers of this project still running (after `down`: none)."""
        done = subprocess.run(["docker", "ps", "-q", "--filter", f"label=com.docker.compose.project={self.project}"],
                              capture_output=True, text=True, check=True)  # fmt: skip
        return done.stdout.split()

    def crash(self, service: str) -> None:
        """SIGKILLs the container's first process from the host (a crash, which `restart:` answers)."""
        pid = int(self.inspect(service, "{{.State.Pid}}"))
        os.kill(pid, 9)

    def wait_healthy(self, service: str, timeout_s: float = 300) -> float:
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            state = self.inspect(
                service, "{{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}"
            )
            if state in ("running healthy", "running"):
                return time.monotonic() - started
            time.sleep(1)
        raise ComposeError(
            f"{service} is not healthy after {timeout_s:.0f} s:\n{self.logs(service, tail=40)}"
        )

    # --- state ---

    def sql(self, query: str) -> list[list[str]]:
        """Rows of a query, run by psql inside the postgres container as the services' role `clawgym`."""
        done = self.compose("exec", "-T", "postgres", "psql", "-U", "clawgym", "-d", "clawgym", "-At", "-F", "\t",
                            "-c", query)  # fmt: skip
        return [line.split("\t") for line in done.stdout.splitlines() if line]

    def redis(self, *args: str) -> str:
        """A redis-cli command inside the redis container (REDISCLI_AUTH there holds the password)."""
        return self.compose("exec", "-T", "redis", "redis-cli", *args).stdout.strip()

    def prometheus(self, path: str, **params: str) -> dict:
        url = (
            f"http://127.0.0.1:{self.ports['CLAWGYM_PROMETHEUS_PORT']}{path}?{urllib.parse.urlencode(params)}"
        )
        with urllib.request.urlopen(url, timeout=30) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise ComposeError(f"prometheus {path} {params}: {body}")
        return body["data"]

    # --- the run ---

    def follow_run(self, crash: list[str] = (), timeout_s: float = 2400) -> RunFacts:
        """Waits for the trainer to exit, crashing `crash` one by one after steps 1, 2, …; gathers the facts."""
        facts = RunFacts(started_at=time.time())
        pending = list(crash)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, code, restarts = self.inspect(
                "trainer", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}"
            ).split()
            if status == "exited" and code == "0":  # the run finished (a crash exits non-zero and restarts)
                break
            if int(restarts) > 3:
                raise ComposeError(f"the trainer keeps failing:\n{self.logs('trainer', tail=80)}")
            steps = self._steps()
            if pending and steps >= len(facts.crashed) + 1:
                service = pending.pop(0)
                self.crash(service)
                facts.crashed.append(service)
                time.sleep(2)
                self.wait_healthy(service)
            time.sleep(3)
        else:
            raise ComposeError(f"the run did not end in {timeout_s:.0f} s:\n{self.logs('trainer', tail=60)}")
        facts.ended_at = time.time()
        facts.trainer_exit = int(self.inspect("trainer", "{{.State.ExitCode}}"))
        self._gather(facts)
        return facts

    def run_folder(self, run_name: str) -> dict:
        """What the trainer left in its run folder (the run's checkpoint folder, in the checkpoints
        volume): its file names, how many TensorBoard event files, report.json's evaluation labels
        and summary.json; read by a one-off container of the trainer's image."""
        script = (
            "import json, pathlib, sys; f = pathlib.Path(sys.argv[1]); "
            "print(json.dumps({'files': sorted(p.name for p in f.iterdir()), "
            "'events': len(list(f.glob('tensorboard/events.out.tfevents.*'))), "
            "'labels': sorted({e['label'] for e in json.loads((f / 'report.json').read_text())['evals']}), "
            "'summary': json.loads((f / 'summary.json').read_text())}))"
        )
        done = self.compose(
            "run", "--rm", "--no-deps", "--entrypoint", "python", "trainer", "-c", script,
            f"/data/checkpoints/{run_name}",
        )  # fmt: skip
        return json.loads(done.stdout.strip().splitlines()[-1])

    def _steps(self) -> int:
        rows = self.sql("select count(*) from train_steps")
        return int(rows[0][0]) if rows else 0

    def _gather(self, facts: RunFacts) -> None:
        facts.steps = self._steps()
        facts.checkpoints = [int(r[0]) for r in self.sql("select version from checkpoints order by version")]
        facts.versions_served = sorted({int(v) for v in LOADED.findall(self.logs("inference"))})
        facts.calls = int(self.sql("select count(*) from calls")[0][0])
        facts.rollouts = {
            s: int(n) for s, n in self.sql("select status, count(*) from rollouts group by status")
        }
        facts.groups = int(self.sql("select count(*) from groups")[0][0])
        facts.groups_consumed = int(
            self.sql("select count(*) from groups where consumed_version is not null")[0][0]
        )
        keys = [k for k in self.redis("--scan", "--pattern", "*groups.ready").split() if k]
        facts.groups_announced = sum(int(self.redis("XLEN", k) or 0) for k in keys)
        for harness, metrics in self.sql("select harness, metrics from evals order by id"):
            facts.pass_at_1[harness] = float(json.loads(metrics)["pass@1"])
        acked = {(r, int(s)) for r, s, _ in ACK.findall(self.logs("proxy"))}
        facts.acked_calls = len(acked)
        stored = {(r, int(s)) for r, s in self.sql("select rollout_id, seq from calls")}
        facts.calls_lost = len(acked - stored)
        for service in ("store", "inference", "proxy", "orchestrator", "trainer"):
            facts.restarts[service] = int(self.inspect(service, "{{.RestartCount}}"))

    # --- dashboards ---

    def panel_results(self, start: float, end: float, step_s: int = 15) -> dict[str, int]:
        """Every panel query of every dashboard → how many series Prometheus returns over [start, end]."""
        out: dict[str, int] = {}
        for path in sorted(DASHBOARDS.glob("*.json")):
            for title, expr in panel_queries(json.loads(path.read_text())):
                data = self.prometheus("/api/v1/query_range", query=expr, start=f"{start:.0f}", end=f"{end:.0f}",
                                       step=str(step_s))  # fmt: skip
                out[f"{path.stem}: {title}: {expr}"] = len(data["result"])
        return out


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel, rows' nested panels included."""
    found = []
    for panel in dashboard.get("panels", []):
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                if target.get("expr"):
                    found.append((inner.get("title", ""), target["expr"]))
    return found
