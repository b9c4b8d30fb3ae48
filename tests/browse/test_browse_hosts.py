"""DNS rebinding: the rollout browser answers only the Host names it is served by, over real HTTP on
loopback, from the real `clawgym browse` and from the store service's browser port. A page on
`evil.example` re-pointed at 127.0.0.1 sends `Host: evil.example`; it must read nothing."""

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from clawgym.config import StoreConfig
from clawgym.store.sql import SqlStore
from clawgym_services.store.server import create_server

CLAWGYM = str(Path(sys.executable).with_name("clawgym"))


def get(port: int, host: str, path: str = "/api/runs") -> httpx.Response:
    """GET 127.0.0.1:port/path as a browser that reached it by the name `host` would send it."""
    return httpx.get(f"http://127.0.0.1:{port}{path}", headers={"Host": host}, timeout=30)


def check_refused(reply: httpx.Response, run_id: str) -> None:
    assert reply.status_code == 403, (
        f"a foreign Host must be refused, got {reply.status_code}: {reply.text[:300]}"
    )
    assert "is not one this rollout browser is served by" in reply.json()["detail"], reply.text
    assert run_id not in reply.text, "nothing of the store may reach a rebinding page"


@pytest.fixture
def browsed(tmp_path: Path, free_port: int) -> Iterator[tuple[int, str]]:
    """`clawgym browse --run-dir` on 127.0.0.1 (allowing runs.example too); yields its port and run id."""
    run_dir = tmp_path / "20260101-000000"
    run_dir.mkdir()
    store = SqlStore(f"sqlite:///{run_dir / 'clawgym.db'}")
    run_id = store.create_run("secret-run", {"kind": "test"}).id
    store.close()
    server = subprocess.Popen(
        [CLAWGYM, "browse", "--run-dir", str(run_dir), "--port", str(free_port), "--allow-host", "runs.example"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while True:
        try:
            get(free_port, f"127.0.0.1:{free_port}").raise_for_status()
            break
        except httpx.HTTPError:
            assert server.poll() is None, f"clawgym browse exited: {server.stdout.read()}"
            assert time.monotonic() < deadline, "clawgym browse did not start in 120 s"
            time.sleep(0.2)
    yield free_port, run_id
    server.terminate()
    server.wait(timeout=30)


def test_clawgym_browse_refuses_a_rebinding_host_and_answers_its_own_names(browsed) -> None:
    port, run_id = browsed
    for host in (f"evil.example:{port}", "evil.example", f"localhost.evil.example:{port}", ""):
        check_refused(get(port, host), run_id)
    check_refused(get(port, f"evil.example:{port}", "/"), run_id)  # the page itself too
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", "LOCALHOST", "runs.example:9000"):
        reply = get(port, host)
        assert reply.status_code == 200, f"{host!r}: {reply.status_code} {reply.text[:300]}"
        assert [r["id"] for r in reply.json()["runs"]] == [run_id], host
    assert get(port, "10.1.2.3:8600").status_code == 200, "an IP address is no DNS name to rebind"


def test_the_store_services_browser_answers_its_allow_list_only(
    sqlite_url: str, rpc_secret: str, free_port
) -> None:
    """store.browse_allowed_hosts: patterns beside the bound address; any other name gets 403."""
    store = SqlStore(sqlite_url)
    run_id = store.create_run("secret-run").id
    cfg = StoreConfig(url=sqlite_url, port=0, metrics_port=0, browse_port=free_port,
                      browse_allowed_hosts=["*.corp.example"])  # fmt: skip
    server = create_server(cfg, host="127.0.0.1", store=store, secret=rpc_secret)
    server.start()
    try:
        check_refused(get(free_port, f"evil.example:{free_port}"), run_id)
        check_refused(get(free_port, "corp.example.evil.example"), run_id)
        for host in (f"store.corp.example:{free_port}", f"127.0.0.1:{free_port}", "localhost"):
            reply = get(free_port, host)
            assert reply.status_code == 200 and reply.json()["runs"][0]["id"] == run_id, (
                host,
                reply.text[:300],
            )
    finally:
        server.stop(grace=None)
        store.close()
