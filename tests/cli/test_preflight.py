"""A bad model spec, store, bus, suite or a port in use is refused before anything loads: exit 2, one
line naming the key or flag to change, within seconds (`clawgym.preflight`), through the real CLI.

Each command's model cache is a folder of the test's own (`cache_dir`): a refusal leaves it unmade,
so nothing was loaded. The code before these checks (2 shared cores, load 5-10) loaded the policy's
tokenizer first and took 11.5 s to refuse an unreachable PostgreSQL in `clawgym train`, 10.6 s a
missing model folder, 13.5 s an SQLite folder it could not make and 18.3 s an unreachable Redis;
`clawgym serve inference` and `serve proxy` loaded the model before binding, then failed with a
traceback (exit 1 or 3, 6-7 s with tiny-qwen3); the store and orchestrator services with a traceback
(exit 1), browse with uvicorn's "[Errno 98]" (exit 3). With the checks each refusal took 1-4 s.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import RPC_SECRET

REFUSAL_BOUND_S = 10.0  # generous: a refusal takes 1-4 s on 2 busy cores, the old code 10-18 s


@pytest.fixture(autouse=True)
def rpc_secret_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The services refuse to start without the rpc secret; the CLI's subprocesses inherit it."""
    monkeypatch.setenv("CLAWGYM_RPC__SECRET", RPC_SECRET)


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A loopback port another socket listens on while the test runs."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.fixture
def timed(clawgym: Callable[..., subprocess.CompletedProcess]) -> Callable[..., tuple]:
    def run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
        start = time.monotonic()
        result = clawgym(*args, timeout=300)
        return result, time.monotonic() - start

    return run


@pytest.fixture
def config(run_config: Callable[..., Path], tmp_path: Path) -> Callable[..., Path]:
    """`run_config` whose model cache is the test's own folder (so a test sees that no model loaded)."""

    def write(**sections: dict) -> Path:
        inference = {"cache_dir": str(tmp_path / "models"), **sections.pop("inference", {})}
        return run_config(inference=inference, **sections)

    return write


def refusal(result: subprocess.CompletedProcess, elapsed: float | None = None) -> str:
    """The refusal's one line, after checking it is one (exit 2, no traceback) and, where `elapsed` is
    given, that it came within REFUSAL_BOUND_S."""
    output = result.stdout + result.stderr
    assert result.returncode == 2, f"a refusal exits 2, got {result.returncode}:\n{output}"
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, f"a refusal is one line, got {len(lines)}:\n{output}"
    if elapsed is not None:
        assert elapsed < REFUSAL_BOUND_S, f"the refusal took {elapsed:.1f} s: something loaded first"
    return lines[0]


def assert_nothing_loaded(tmp_path: Path) -> None:
    assert not (tmp_path / "models").exists(), "the policy was loaded (its cache built) before the refusal"


# --- the store and the bus ---


def test_train_refuses_an_unreachable_postgresql_before_loading_the_policy(
    timed, config, free_port: int, tmp_path: Path
) -> None:
    """Nothing listens on the store's port: the line names the address and store.url."""
    run_yaml = config(store={"url": f"postgresql+psycopg://postgres@127.0.0.1:{free_port}/test"})
    result, elapsed = timed("train", "-c", str(run_yaml), "--run-dir", str(tmp_path / "run"))
    line = refusal(result, elapsed)
    assert f"cannot reach PostgreSQL at 127.0.0.1:{free_port}" in line and "fix store.url" in line, line
    assert_nothing_loaded(tmp_path)
    assert not (tmp_path / "run").exists(), "a refused start leaves no run folder"


@pytest.mark.parametrize("where", ["config", "--store.url"])
def test_eval_refuses_an_unreachable_store_before_loading_the_policy(
    timed, config, free_port: int, tmp_path: Path, where: str
) -> None:
    """The results store: the config's, or the one --store.url names."""
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port}/test"
    if where == "config":
        result, elapsed = timed("eval", "-c", str(config(store={"url": url})))
    else:
        result, elapsed = timed("eval", "-c", str(config()), "--store.url", url)
    line = refusal(result, elapsed)
    assert f"cannot reach PostgreSQL at 127.0.0.1:{free_port}" in line and "fix store.url" in line, line
    assert_nothing_loaded(tmp_path)


def test_the_store_service_refuses_an_unreachable_postgresql(timed, free_port: int) -> None:
    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port}/test"
    result, _ = timed("serve", "store", "--url", url, "--port", "0", "--metrics-port", "0")
    line = refusal(result)
    assert line.startswith("clawgym serve store: cannot reach PostgreSQL"), line
    assert "fix store.url" in line, line


def test_train_refuses_an_unreachable_redis_bus_before_loading_the_policy(
    timed, config, free_port: int, tmp_path: Path
) -> None:
    run_yaml = config(store={"bus_url": f"redis://127.0.0.1:{free_port}/0"})
    result, elapsed = timed("train", "-c", str(run_yaml), "--run-dir", str(tmp_path / "run"))
    line = refusal(result, elapsed)
    assert f"cannot reach Redis at 127.0.0.1:{free_port}" in line and "fix store.bus_url" in line, line
    assert_nothing_loaded(tmp_path)


def test_train_refuses_an_sqlite_store_whose_folder_cannot_be_made(timed, config, tmp_path: Path) -> None:
    """The store makes a missing folder, but not under a file: the line names the file in the way."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    run_yaml = config(store={"url": f"sqlite:///{blocker / 'runs' / 'store.db'}"})
    result, elapsed = timed("train", "-c", str(run_yaml), "--run-dir", str(tmp_path / "run"))
    line = refusal(result, elapsed)
    assert f"{blocker} is not a folder" in line and "fix store.url" in line, line
    assert_nothing_loaded(tmp_path)


# --- model specs and suites ---


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["train", "-c", "{config}", "--run-dir", "{tmp}/run", "--set", "trainer.model={missing}"], "trainer.model"),
        (["quickstart", "--model", "{missing}", "--run-dir", "{tmp}/run"], "trainer.model"),
        (["eval", "-c", "{config}", "--model", "{missing}"], "trainer.model"),
        (["rollout", "-c", "{config}", "-H", "reference", "-t", "some-task", "--model", "{missing}"], "trainer.model"),
        (["serve", "inference", "--model", "{missing}", "--port", "0", "--metrics-port", "0"], "inference.model"),
        (["serve", "proxy", "--inference.model", "{missing}", "--port", "0"], "inference.model"),
    ],
    ids=["train", "quickstart", "eval", "rollout", "serve-inference", "serve-proxy"],
)  # fmt: skip
def test_a_missing_model_folder_is_refused_naming_its_key(timed, config, tmp_path: Path, args, key) -> None:
    """A model folder that does not exist: every command that loads a policy says which key names it."""
    values = {"config": str(config()), "tmp": str(tmp_path), "missing": str(tmp_path / "models-x" / "gone")}
    result, elapsed = timed(*(a.format(**values) for a in args))
    line = refusal(result, elapsed)
    assert f"{key}: unknown model spec" in line, line
    assert not (tmp_path / "run").exists(), "a refused start leaves no run folder"


def test_the_trainer_service_refuses_an_unknown_suite_before_loading_the_policy(
    timed, config, tmp_path: Path
) -> None:
    run_yaml = config(trainer={"suite": "no-such-suite"})
    result, elapsed = timed("serve", "trainer", "-c", str(run_yaml), "--port", "0", "--metrics-port", "0")
    line = refusal(result, elapsed)
    assert "trainer.suite: no suite 'no-such-suite'" in line, line
    assert_nothing_loaded(tmp_path)


def test_rollout_refuses_an_unknown_suite_before_loading_the_policy(timed, config, tmp_path: Path) -> None:
    result, elapsed = timed(
        "rollout", "-c", str(config()), "-H", "reference", "-t", "some-task", "--suite", "no-such-suite"
    )
    line = refusal(result, elapsed)
    assert "--suite: no suite 'no-such-suite'" in line, line
    assert_nothing_loaded(tmp_path)


# --- ports ---

SQLITE = "sqlite:///{tmp}/store.db"
PORT_CASES = {
    # id: (argv with {port} the taken one and every other port 0, what the line names, how to change it)
    "browse": (["browse", "--store.url", SQLITE, "--port", "{port}"], "port {port} on 127.0.0.1", "--port"),
    "store": (
        ["serve", "store", "--url", SQLITE, "--port", "{port}", "--metrics-port", "0"],
        "store.port {port} on 127.0.0.1",
        "--port, --set store.port=N or CLAWGYM_STORE__PORT",
    ),
    "store-metrics": (
        ["serve", "store", "--url", SQLITE, "--port", "0", "--metrics-port", "{port}"],
        "store.metrics_port {port} on 127.0.0.1",
        "--metrics-port, --set store.metrics_port=N or CLAWGYM_STORE__METRICS_PORT",
    ),
    "store-browse": (
        ["serve", "store", "--url", SQLITE, "--port", "0", "--metrics-port", "0", "--browse-port", "{port}"],
        "store.browse_port {port} on 127.0.0.1",
        "--browse-port, --set store.browse_port=N or CLAWGYM_STORE__BROWSE_PORT",
    ),
    "inference": (
        ["serve", "inference", "--model", "tiny-qwen3", "--cache-dir", "{tmp}/models", "--port", "{port}",
         "--metrics-port", "0"],
        "inference.port {port} on 127.0.0.1",
        "--port, --set inference.port=N or CLAWGYM_INFERENCE__PORT",
    ),
    "inference-metrics": (
        ["serve", "inference", "--model", "tiny-qwen3", "--cache-dir", "{tmp}/models", "--port", "0",
         "--metrics-port", "{port}"],
        "inference.metrics_port {port} on 127.0.0.1",
        "--metrics-port, --set inference.metrics_port=N or CLAWGYM_INFERENCE__METRICS_PORT",
    ),
    "proxy": (
        ["serve", "proxy", "--inference.model", "tiny-qwen3", "--inference.cache-dir", "{tmp}/models",
         "--store.url", SQLITE, "--port", "{port}"],
        "proxy.port {port} on 127.0.0.1",
        "--port, --set proxy.port=N or CLAWGYM_PROXY__PORT",
    ),
    "proxy-reuse-port": (  # a shared port is shared only with sockets that share it too
        ["serve", "proxy", "--inference.model", "tiny-qwen3", "--inference.cache-dir", "{tmp}/models",
         "--store.url", SQLITE, "--port", "{port}", "--reuse-port", "true"],
        "proxy.port {port} on 127.0.0.1",
        "--port, --set proxy.port=N or CLAWGYM_PROXY__PORT",
    ),
    "orchestrator": (
        ["serve", "orchestrator", "--store.url", SQLITE, "--port", "{port}", "--metrics-port", "0"],
        "orchestrator.port {port} on 127.0.0.1",
        "--port, --set orchestrator.port=N or CLAWGYM_ORCHESTRATOR__PORT",
    ),
    "orchestrator-metrics": (
        ["serve", "orchestrator", "--store.url", SQLITE, "--port", "0", "--metrics-port", "{port}"],
        "orchestrator.metrics_port {port} on 127.0.0.1",
        "--metrics-port, --set orchestrator.metrics_port=N or CLAWGYM_ORCHESTRATOR__METRICS_PORT",
    ),
    "trainer": (
        ["serve", "trainer", "--model", "tiny-qwen3", "--inference.cache-dir", "{tmp}/models", "--store.url", SQLITE,
         "--port", "{port}", "--metrics-port", "0"],
        "trainer.port {port} on 127.0.0.1",
        "--port, --set trainer.port=N or CLAWGYM_TRAINER__PORT",
    ),
    "trainer-metrics": (
        ["serve", "trainer", "--model", "tiny-qwen3", "--inference.cache-dir", "{tmp}/models", "--store.url", SQLITE,
         "--port", "0", "--metrics-port", "{port}"],
        "trainer.metrics_port {port} on 127.0.0.1",
        "--metrics-port, --set trainer.metrics_port=N or CLAWGYM_TRAINER__METRICS_PORT",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("args", "what", "change"), list(PORT_CASES.values()), ids=list(PORT_CASES))
def test_a_port_in_use_is_refused_naming_the_flag_that_changes_it(
    timed, taken_port: int, tmp_path: Path, args, what, change
) -> None:
    """Another process listens on the port: the line names the port, its host and how to choose another,
    before any model loads (the services bound their ports only after loading the policy)."""
    values = {"port": str(taken_port), "tmp": str(tmp_path)}
    result, elapsed = timed(*(a.format(**values) for a in args))
    loads_a_model = "tiny-qwen3" in args  # the others refused within 2 s before the checks too
    line = refusal(result, elapsed if loads_a_model else None)
    assert f"{what.format(**values)} is in use: choose another with {change}" in line, line
    assert_nothing_loaded(tmp_path)
