"""The whole rollout path for end-to-end tests: orchestrator → sandbox → real harness → real proxy → store.

Only the policy is scripted (STYLE.md 16): a `ScriptedEngine` behind the real proxy app answers,
through the real tiny-qwen3 tokenizer, first with a tool call (or bash block) that does the task,
then with a final message. Which of the two it sends depends on the prompt (how many assistant
turns it already holds), so a harness's side calls cannot shift the script.

- `tokenizer`: tiny-qwen3.
- `stack(script, backend=…)`: a SQLite store, the proxy on a free 127.0.0.1 port, and an in-process
  `Orchestrator` pointed at it; torn down after the test. `Stack.requests` lists the (method, path)
  of every HTTP request the proxy received, in order.
- `scripted(first, final)`: the script for an engine.
- `k8s_cluster`: the sandbox tests' session fixture (tests/sandbox/conftest.py), reused as is.
- `write_word`: a bundled mini-suite task "Create a file named F containing the text W.", its answer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from clawgym.assemble import build_orchestrator
from clawgym.config import ClawgymConfig
from clawgym.inference.scripted import ScriptedEngine
from clawgym.orchestrator.runner import Orchestrator
from clawgym.policies import load_tokenizer
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.store.sql import SqlStore
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.model import Task
from clawgym.tasks.suites import resolve_suite

REPO = Path(__file__).resolve().parents[2]
WRITE_WORD = re.compile(r"^Create a file named (\S+) containing the text (\S+)\.$")


def _sandbox_conftest():
    """tests/sandbox/conftest.py as a module (test folders are not packages under importlib mode)."""
    spec = importlib.util.spec_from_file_location(
        "clawgym_tests_sandbox_conftest", REPO / "tests/sandbox/conftest.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


k8s_cluster = _sandbox_conftest().k8s_cluster  # the local Kubernetes cluster, shared by lease



class RequestLog:
    """The proxy app behind an ASGI wrapper that notes each HTTP request's (method, path) first."""

    def __init__(self, app) -> None:
        self.app = app
        self.requests: list[tuple[str, str]] = []

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.requests.append((scope["method"], scope["path"]))
        await self.app(scope, receive, send)


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer("tiny-qwen3")


@dataclass
class Stack:
    store: SqlStore
    engine: ScriptedEngine
    proxy_url: str
    orchestrator: Orchestrator
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path) the proxy received

    def run(self, coro):
        return asyncio.run(coro)


@pytest.fixture
def scripted(tokenizer) -> Callable[[str, str], Callable[[list[int], int], list[int]]]:
    """script(first, final): the engine answers `first` to a prompt that continues none of its
    earlier answers (a rollout's first call), `final` to one that extends an earlier prompt + answer;
    both tokenized as the policy would emit them, ending in <|im_end|>. Counting assistant turns
    instead would miscount harnesses whose first prompt already holds example turns."""
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def make(first: str, final: str) -> Callable[[list[int], int], list[int]]:
        replies = [[*tokenizer.encode(t, add_special_tokens=False), end] for t in (first, final)]
        answered: list[list[int]] = []  # prompt + answer of every earlier call

        def script(prompt_ids: list[int], index: int) -> list[int]:
            continues = any(len(seq) <= len(prompt_ids) and prompt_ids[: len(seq)] == seq for seq in answered)
            reply = list(replies[1 if continues else 0])
            answered.append([*prompt_ids, *reply])
            return reply

        return script

    return make


@pytest.fixture
def stack(tokenizer, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    """Builds the store + proxy + orchestrator stack around a script (see the module docstring)."""
    closers: list[Callable[[], None]] = []

    def make(
        script, *, sandbox: dict | None = None, proxy_host_url: str | None = None, **orchestrator
    ) -> Stack:
        store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
        closers.append(store.close)
        engine = ScriptedEngine(script, vocab_size=len(tokenizer), max_context=1_000_000)
        app = RequestLog(create_app(ProxyConfig(), engine, store, tokenizer))
        server = ServerThread(app).__enter__()
        closers.append(lambda: server.__exit__(None, None, None))
        root = tmp_path / "sandboxes"
        root.mkdir(mode=0o711, exist_ok=True)
        root.chmod(0o711)
        tmp_path.chmod(0o711)  # sandbox uids traverse to their storage
        cfg = ClawgymConfig(
            sandbox=sandbox or {"owner": "e2e", "local": {"root_dir": str(root), "isolation": "bwrap"}},
            orchestrator={"proxy_url": server.url, "retry_backoff_s": 0.1, "max_attempts": 1, **orchestrator},
        )
        orch = build_orchestrator(cfg, store)
        closers.append(lambda: asyncio.run(orch.close()))
        return Stack(store, engine, server.url, orch, app.requests)

    yield make
    for close in reversed(closers):
        close()


@dataclass(frozen=True)
class WriteWord:
    """A bundled mini-suite task "Create a file named F containing the text W." and its answer."""

    task: Task
    file: str
    word: str

    @property
    def command(self) -> str:
        return f"echo {self.word} > {self.file}"


@pytest.fixture(scope="session")
def write_word() -> WriteWord:
    """The first `write_word` task of the bundled mini suite's train split."""
    for task in load_tasks(resolve_suite("mini"), split="train"):
        if match := WRITE_WORD.match(task.instruction):
            return WriteWord(task, match.group(1), match.group(2))
    raise AssertionError("the mini suite has no write_word task")
