"""Deeply nested JSON under attack (issue #16, item 5): a 400 in the caller's protocol, never a 500.

Reproduces: a tool schema or a tool call's input nested 500-950 levels parsed (the stdlib parser
goes that deep) and then overflowed the recursion of the control-token escaping: HTTP 500 and a
traceback per request. Real parts only: the real app served by uvicorn on a loopback port, the real
tiny-qwen3 tokenizer, a scripted engine, a real SQLite store.
"""

import httpx
import pytest

from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from tests.protocols.fuzz_bodies import DEEP, NESTING_SITES, scripted_proxy, with_deep

DEPTH_LIMIT = ProxyConfig().max_json_depth


def error_shape(endpoint: str, reply: dict) -> str:
    """The message of a 400 in the endpoint's protocol shape (AssertionError if it is not that shape)."""
    if endpoint.startswith("/v1/messages"):
        assert reply["type"] == "error" and reply["error"]["type"] == "invalid_request_error", reply
    else:
        assert reply["error"]["type"] == "invalid_request_error" and "message" in reply["error"], reply
    return reply["error"]["message"]


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    served = scripted_proxy(str(tmp_path_factory.mktemp("depth") / "store.db"), ["done"])
    headers = {"x-api-key": served.rollout.token, "content-type": "application/json"}
    with (
        ServerThread(served.app) as server,
        httpx.Client(base_url=server.url, headers=headers, timeout=60) as client,
    ):
        yield client, served.store, served.rollout.rollout_id
    served.store.close()


@pytest.mark.parametrize("site", list(NESTING_SITES))
@pytest.mark.parametrize("levels", [DEPTH_LIMIT + 1, 500, 950, 5000])
def test_json_nested_past_the_limit_is_a_400_in_the_callers_protocol(proxy, site, levels):
    """Nested past `proxy.max_json_depth` (up to 5000 levels, which the stdlib parser refuses
    itself): a 400 in the endpoint's error shape that says so, and nothing recorded."""
    client, store, rollout_id = proxy
    endpoint, body, as_string = NESTING_SITES[site]
    before = len(store.list_calls(rollout_id))
    r = client.post(endpoint, content=with_deep(body, levels, as_string))
    assert r.status_code == 400, f"{site} nested {levels} deep: {r.status_code} {r.text[:300]}"
    message = error_shape(endpoint, r.json())
    # deeper than the stdlib parser goes (its recursion limit less the server's stack): its own message
    assert "nested deeper than" in message or "not JSON" in message, message
    assert len(store.list_calls(rollout_id)) == before, "nothing is recorded for a refused request"


@pytest.mark.parametrize("site", list(NESTING_SITES))
def test_json_nested_up_to_the_limit_is_served(proxy, site):
    """The deepest nesting the limit allows is rendered and answered (the escaping's recursion has
    room for it), counting the body's own levels above the nested value."""
    client = proxy[0]
    endpoint, body, as_string = NESTING_SITES[site]
    # the body's levels above the spot: the spot holds a string, nested 0 deep
    above = 0 if as_string else _levels_above(body)
    r = client.post(endpoint, content=with_deep(body, DEPTH_LIMIT - above, as_string))
    assert r.status_code == 200, f"{site} at the limit: {r.status_code} {r.text[:300]}"


def _levels_above(body: dict) -> int:
    """How many containers enclose the DEEP placeholder in `body`."""
    stack = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        for child in value.values() if isinstance(value, dict) else value:
            if child == DEEP:
                return depth
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
    raise AssertionError("no DEEP placeholder")
