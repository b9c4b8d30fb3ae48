"""Fixtures for the proxy tests: the real app on a loopback port, a scripted engine, a real store.

`proxy_factory(texts, …)` starts `create_app` under uvicorn in a thread on a free port with a
`ScriptedEngine` answering the given texts (tokenized by the real tiny-qwen3 tokenizer), a real
SqlStore (SQLite by default, PostgreSQL when asked) and in-process or Redis live state; it
registers rollouts and hands back their API keys. Everything is torn down after the test.
"""

from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest

from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.live import make_live_state
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.sql import SqlStore

WRITE_FILE_TOOL = {
    "name": "write_file",
    "description": "Write a text file in the workspace.",
    "input_schema": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
}
TOOL_CALL_TEXT = '<tool_call>\n{"name": "write_file", "arguments": {"path": "hello.txt", "content": "héllo wörld"}}\n</tool_call>'
FINAL_TEXT = "I wrote hello.txt — done ✓"



@dataclass
class Proxy:
    url: str
    store: SqlStore
    engine: ScriptedEngine
    tokens: list[str]
    rollout_ids: list[str]
    app: object
    run_id: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def token(self) -> str:
        return self.tokens[0]

    @property
    def rollout_id(self) -> str:
        return self.rollout_ids[0]

    def calls(self, i: int = 0):
        return self.store.list_calls(self.rollout_ids[i])


@pytest.fixture(scope="session")
def script():
    """What the scripted policy says: a write_file tool call, then a final answer (non-ASCII on purpose)."""
    return SimpleNamespace(tool_call=TOOL_CALL_TEXT, final=FINAL_TEXT, tool=WRITE_FILE_TOOL)


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer("tiny-qwen3")


@pytest.fixture
def proxy_factory(tokenizer, tmp_path) -> Iterator:
    """Builds and starts proxies; `store_url`/`redis_url` pick the backends (SQLite, in-process default)."""
    stack = []

    def make(
        texts=(FINAL_TEXT,),
        *,
        engine=None,
        store_url: str | None = None,
        redis_url: str = "",
        rollouts: int = 1,
        harness: str = "test-harness",
        store=None,
        **cfg,
    ) -> Proxy:
        if store is None:
            store = SqlStore(store_url or f"sqlite:///{tmp_path / f'store{len(stack)}.db'}")
            stack.append(store.close)
        if engine is None:
            engine = ScriptedEngine.from_texts(  # stands in for tiny-qwen3, whose tokenizer it uses
                tokenizer, list(texts), max_context=cfg.pop("max_context", 8192), model="tiny-qwen3"
            )
        config = ProxyConfig(redis_url=redis_url, **cfg)
        live = make_live_state(
            redis_url, config.redis_prefix, config.turn_cache_ttl_s, config.memory_max_rollouts
        )
        app = create_app(config, engine, store, tokenizer, live=live)
        server = ServerThread(app, config).__enter__()
        stack.append(lambda: server.__exit__(None, None, None))
        run = store.create_run("proxy-test")
        specs = [
            RolloutSpec(group_id=f"g-{run.id[:8]}", task_id="t", harness=harness) for _ in range(rollouts)
        ]
        registered = store.register_rollouts(run.id, specs)
        return Proxy(
            url=server.url,
            store=store,
            engine=engine,
            tokens=[r.token for r in registered],
            rollout_ids=[r.rollout_id for r in registered],
            app=app,
            run_id=run.id,
        )

    yield make
    for close in reversed(stack):
        close()
