"""The proxy an embedded run serves (`clawgym.assemble.open_embedded_proxy`) and the app the proxy
service serves (`clawgym.assemble.build_proxy_app`): one assembly, real HTTP on a loopback port, a real
SQLite store, the real tiny-qwen3 tokenizer; only the engine is scripted."""

import httpx
import pytest

from clawgym.assemble import build_proxy_app, open_embedded_proxy
from clawgym.config import ClawgymConfig
from clawgym.inference.scripted import ScriptedEngine
from clawgym.records import RolloutSpec
from clawgym.store.sql import SqlStore


@pytest.fixture
def store(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'embedded.db'}")
    yield store
    store.close()


def test_the_embedded_proxy_records_a_call_on_loopback_and_stop_closes_its_port(tokenizer, store, script):
    engine = ScriptedEngine.from_texts(tokenizer, [script.final], model="tiny-qwen3")
    run = store.create_run("embedded")
    (rollout,) = store.register_rollouts(run.id, [RolloutSpec(group_id="g", task_id="t", harness="h")])
    url, stop = open_embedded_proxy(
        ClawgymConfig(inference={"model": "tiny-qwen3"}), engine, store, tokenizer
    )
    try:
        assert url.startswith("http://127.0.0.1:"), f"served on loopback, got {url}"
        reply = httpx.post(
            f"{url}/v1/chat/completions",
            json={"model": "tiny-qwen3", "messages": [{"role": "user", "content": "hi"}]},
            headers={"authorization": f"Bearer {rollout.token}"},
            timeout=60,
        )
        assert reply.status_code == 200, reply.text
        assert reply.json()["choices"][0]["message"]["content"] == script.final
        (call,) = store.list_calls(rollout.rollout_id)
        assert len(call.prompt_ids) > 0, "the call is recorded with its tokens"
    finally:
        stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/healthz", timeout=5)


@pytest.mark.parametrize(("model", "renders_tools"), [("tiny-qwen3", True), ("smollm2-135m", False)])
def test_the_proxy_app_renders_tools_as_the_served_policy_does(tokenizer, store, model, renders_tools):
    """The served policy's spec decides, not a probe of the tokenizer's template: tiny-qwen3's template
    would render tools either way, so a proxy that stopped asking the spec would render them for smollm2."""
    engine = ScriptedEngine.from_texts(tokenizer, ["ok"], model=model)
    app = build_proxy_app(ClawgymConfig(inference={"model": model}), engine, store, tokenizer)
    assert app.state.gateway.template.info.renders_tools is renders_tools, (
        f"{model}'s spec says {renders_tools}"
    )
