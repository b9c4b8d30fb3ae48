"""Manual capture from the command line: `clawgym session new` + `clawgym serve proxy --inference.model … --store.url …`."""

import os
import subprocess
import sys
import time
import uuid

import httpx
import pytest

from clawgym.store.sql import SqlStore

CLI = [sys.executable, "-c", "from clawgym_app.cli import main; main()"]


@pytest.mark.slow
def test_session_new_and_serve_proxy_capture_a_call_by_hand(sqlite_url, free_port):
    """A person registers a session, starts the proxy with the in-process torch engine on
    tiny-qwen3, points a client at it with the printed key, and finds the call in the store. The
    proxy's log keeps the call's access line and acknowledgement at INFO, not its health checks and
    metric scrapes (`clawgym.log_noise`)."""
    out = subprocess.run(
        [*CLI, "session", "new", "--store", sqlite_url, "--harness", "claude-code"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    key = out.stdout.strip().splitlines()[-1]
    assert key.startswith("cg-") and " " not in key, f"the last line is the key alone, got {out.stdout!r}"

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    args = ["serve", "proxy", "--inference.model", "tiny-qwen3", "--store.url", sqlite_url, "--port", str(free_port),
            "--max-new-tokens", "8"]  # fmt: skip
    server = subprocess.Popen(
        [*CLI, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    url = f"http://127.0.0.1:{free_port}"
    try:
        _wait_healthy(server, url)
        r = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {key}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] <= 8, "--max-new-tokens caps the call"
        assert httpx.get(f"{url}/metrics", timeout=10).status_code == 200
    finally:
        server.terminate()
        server.wait(timeout=30)
    log = server.stdout.read()
    assert '"POST /v1/chat/completions HTTP/1.1" 200' in log, f"the call's access line is logged:\n{log}"
    assert "INFO clawgym.proxy.acks: recorded " in log, "the acknowledgement stays (deploy/compose_stack.py)"
    assert "/healthz" not in log and "/metrics" not in log, f"health checks and scrapes are DEBUG:\n{log}"
    store = SqlStore(sqlite_url)
    try:
        rollout = store.resolve_token(key)
        (call,) = store.list_calls(rollout.id)
        assert rollout.harness == "claude-code" and len(call.prompt_ids) > 0, (
            "the call is captured with its tokens"
        )
    finally:
        store.close()


def _wait_healthy(server: subprocess.Popen, url: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert server.poll() is None, f"the proxy exited: {server.stdout.read() if server.stdout else ''}"
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the proxy did not become healthy in {timeout_s} s"
        time.sleep(0.5)


@pytest.mark.slow
def test_two_proxies_share_one_port_and_each_call_records_the_replica_that_served_it(tmp_path, free_port):
    """The chart's host-network mode: replicas bind the same port with `--reuse-port true`, the
    kernel spreads new connections between them, and each call names its replica (`_clawgym.proxy`).
    Their live state (call seq numbers, turns) is shared in the real Redis, as in the chart."""
    url = f"sqlite:///{tmp_path / 'capture.db'}"
    live = ["--redis-url", "redis://127.0.0.1:6379/0", "--redis-prefix", f"test-{uuid.uuid4().hex[:8]}"]
    out = subprocess.run([*CLI, "session", "new", "--store", url], capture_output=True, text=True, timeout=120,
                         check=True)  # fmt: skip
    key = out.stdout.strip().splitlines()[-1]
    def proxy_process(name: str) -> subprocess.Popen:
        args = ["serve", "proxy", "--inference.model", "tiny-qwen3", "--store.url", url, "--port", str(free_port),
                "--reuse-port", "true", "--instance", name, "--max-new-tokens", "4", *live]  # fmt: skip
        return subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    servers = [proxy_process("proxy-a"), proxy_process("proxy-b")]
    proxy = f"http://127.0.0.1:{free_port}"
    try:
        for server in servers:
            _wait_healthy(server, proxy)
        time.sleep(2)  # both listening (the first may have answered alone)
        for i in range(16):  # a new connection per call, as a fresh client makes
            with httpx.Client() as client:
                r = client.post(
                    f"{proxy}/v1/chat/completions",
                    json={"model": "tiny-qwen3", "messages": [{"role": "user", "content": f"hi {i}"}]},
                    headers={"authorization": f"Bearer {key}"},
                    timeout=60,
                )
            assert r.status_code == 200, r.text
    finally:
        for server in servers:
            server.terminate()
            server.wait(timeout=30)
    store = SqlStore(url)
    try:
        calls = store.list_calls(store.resolve_token(key).id)
    finally:
        store.close()
    served_by = [c.response["_clawgym"]["proxy"] for c in calls]
    assert len(calls) == 16 and set(served_by) == {"proxy-a", "proxy-b"}, served_by
