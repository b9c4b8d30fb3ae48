"""The proxy's HTTP edge under attack: huge bodies, slow clients (issue #16, items 6).

Each test reproduces an attack against the real app served by uvicorn as `clawgym serve proxy`
serves it (`clawgym.proxy.serving.uvicorn_config`: the read deadline) on a loopback port, and asserts it
now fails: the key and `Content-Length` are checked before the body is read, the body is capped
while it is read, a client that sends its request too slowly is disconnected. Nothing is
recorded for a refused request.
"""

import re
import select
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from clawgym.inference.scripted import ScriptedEngine

MB = 1024 * 1024
ANTHROPIC_BODY = b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}'


def peak_rss_kib() -> int:
    return int(re.search(r"VmHWM:\s+(\d+)", open("/proc/self/status").read()).group(1))


def reset_peak_rss() -> None:
    """Linux: the peak RSS (VmHWM) restarts from the current RSS (proc(5), clear_refs "5")."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def megabytes(n: int, first: bytes = b"") -> Iterator[bytes]:
    """n MiB streamed in 1 MiB chunks without holding more than one."""
    chunk = b"x" * MB
    yield first + chunk[len(first) :]
    for _ in range(n - 1):
        yield chunk


def test_300_mb_without_a_key_is_refused_without_being_read(proxy_factory):
    """Reproduces: 300 MB without an API key were read whole (+533 MB RSS) before the 401. The
    server runs in this process, so the peak RSS of the process bounds what the server held;
    64 MiB leaves room for the client's chunk and the interpreter's own churn, far below 300."""
    p = proxy_factory()
    reset_peak_rss()
    before = peak_rss_kib()
    for headers in ({"content-length": str(300 * MB)}, {}):  # declared, and chunked (no length)
        r = httpx.post(
            f"{p.url}/v1/messages",
            content=megabytes(300),
            headers={"content-type": "application/json", **headers},
            timeout=120,
        )
        assert r.status_code == 401, r.text[:300]
        assert r.json()["error"]["type"] == "authentication_error", r.text[:300]
    grown_mib = (peak_rss_kib() - before) / 1024
    assert grown_mib < 64, f"the proxy held {grown_mib:.0f} MiB while refusing 300 MB it should not read"
    assert p.calls() == []


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_cap_is_413_in_the_protocols_shape_and_not_recorded(proxy_factory, chunked):
    """A valid key with a body over `max_body_bytes`: declared (refused before reading) or chunked
    (refused as soon as it grows past the cap), answered in each protocol's own error shape."""
    p = proxy_factory(max_body_bytes=MB)
    auth = {"x-api-key": p.token, "authorization": f"Bearer {p.token}", "content-type": "application/json"}
    for path in ("/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions", "/v1/responses"):
        body = megabytes(3, first=b'{"model": "m", "pad": "')
        headers = auth if chunked else {**auth, "content-length": str(3 * MB)}
        r = httpx.post(f"{p.url}{path}", content=body, headers=headers, timeout=60)
        assert r.status_code == 413, (path, r.status_code, r.text[:300])
        if path.startswith("/v1/messages"):
            assert r.json()["type"] == "error" and r.json()["error"]["type"] == "request_too_large", r.text
        else:
            assert r.json()["error"]["type"] == "invalid_request_error", r.text
        assert "limit" in r.text
    assert p.calls() == [], "nothing is recorded for a refused body"
    ok = httpx.post(f"{p.url}/v1/messages", content=ANTHROPIC_BODY, headers=auth, timeout=60)
    assert ok.status_code == 200, "a body under the cap is still served"


# --- slow clients ---

READ_TIMEOUT_S = 1.0
# Cut off within this: the deadline plus generous slack for a loaded 2-core CI machine. Without
# the deadline uvicorn keeps these connections open for ever, so the test cannot pass by luck.
CUT_OFF_BOUND_S = 20.0


def open_socket(url: str) -> socket.socket:
    parts = urlsplit(url)
    return socket.create_connection((parts.hostname, parts.port), timeout=CUT_OFF_BOUND_S)


def seconds_until_closed(sock: socket.socket, head: bytes, trickle: bytes | None) -> float:
    """Sends `head`, then one byte of `trickle` every 0.2 s (nothing if None), until the server
    closes the connection; the seconds that took (fails past CUT_OFF_BOUND_S)."""
    start = time.monotonic()
    if head:
        sock.sendall(head)
    i = 0
    while time.monotonic() - start < CUT_OFF_BOUND_S:
        readable, _, _ = select.select([sock], [], [], 0.2)
        if readable:
            try:
                if sock.recv(65536) == b"":
                    return time.monotonic() - start
            except ConnectionResetError:
                return time.monotonic() - start
            continue
        if trickle is not None:
            try:
                sock.send(trickle[i % len(trickle) : i % len(trickle) + 1])
            except (BrokenPipeError, ConnectionResetError):
                return time.monotonic() - start
            i += 1
    pytest.fail(f"the server kept a too-slow client connected for over {CUT_OFF_BOUND_S} s")


def test_a_client_trickling_its_headers_is_cut_off(proxy_factory):
    p = proxy_factory(read_timeout_s=READ_TIMEOUT_S)
    with open_socket(p.url) as sock:
        head = b"POST /v1/messages HTTP/1.1\r\nhost: x\r\n"
        took = seconds_until_closed(sock, head, trickle=b"x-slow: loris\r\n")  # never ends the head
    assert took >= READ_TIMEOUT_S * 0.5, "closed for being slow, not straight away"


def test_a_connection_that_sends_nothing_is_cut_off(proxy_factory):
    p = proxy_factory(read_timeout_s=READ_TIMEOUT_S)
    with open_socket(p.url) as sock:
        seconds_until_closed(sock, b"", trickle=None)


def test_a_client_trickling_its_body_is_cut_off_and_nothing_is_recorded(proxy_factory):
    p = proxy_factory(read_timeout_s=READ_TIMEOUT_S)
    body = ANTHROPIC_BODY
    head = (
        f"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: {p.token}\r\n"
        f"content-type: application/json\r\ncontent-length: {len(body) + 10_000}\r\n\r\n"
    ).encode()
    with open_socket(p.url) as sock:
        seconds_until_closed(sock, head + body[:10], trickle=body[10:])
    assert p.calls() == [], "a request cut off mid-body is not recorded"
    r = httpx.post(f"{p.url}/v1/messages", content=body, headers={"x-api-key": p.token}, timeout=60)
    assert r.status_code == 200, "the proxy still serves well-behaved clients"


def test_the_read_deadline_does_not_cut_a_long_answer(proxy_factory, tokenizer):
    """The deadline covers receiving the request only: a streamed answer that takes several
    times the deadline (40 tokens, 0.1 s each) arrives whole and is recorded."""
    text = " ".join(f"w{i}" for i in range(20))
    engine = ScriptedEngine.from_texts(tokenizer, [text], token_delay_s=0.1, model="tiny-qwen3")
    p = proxy_factory(engine=engine, read_timeout_s=READ_TIMEOUT_S)
    started = time.monotonic()
    body = b'{"model": "m", "stream": true, "messages": [{"role": "user", "content": "hi"}]}'
    r = httpx.post(f"{p.url}/v1/chat/completions", content=body, headers={"x-api-key": p.token}, timeout=120)
    assert r.status_code == 200 and r.text.rstrip().endswith("data: [DONE]"), r.text[-300:]
    assert time.monotonic() - started > READ_TIMEOUT_S, "the answer took longer than the read deadline"
    assert len(p.calls()) == 1
