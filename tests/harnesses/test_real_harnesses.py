"""Harnesses end to end through the real proxy: a scripted engine plays the policy, a real local
sandbox runs the harness, the task's verifier gives the reward, the store holds the calls.

The proxy is the real app (`clawgym.proxy.app.create_app`) under uvicorn on a loopback
port, with the real tiny-qwen3 tokenizer and a real SQLite store; only the engine is scripted.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from clawgym.harnesses.base import Limits
from clawgym.harnesses.mini_swe_agent import MiniSweAgent
from clawgym.harnesses.registry import get_harness
from clawgym.inference.scripted import ScriptedEngine
from clawgym.orchestrator.attempt import run_task
from clawgym.policies import load_tokenizer, policy_spec
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import RolloutSpec
from clawgym.store.sql import SqlStore
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir

TEMPLATES = Path(__file__).parent.parent / "data" / "chat_templates"


class Proxy:
    """The proxy app on 127.0.0.1:<free port> (`ServerThread`), answering `texts` in order (or as
    `engine` answers), as the policy `model` (a spec or local folder: its tokenizer, chat template
    and tool-call format)."""

    def __init__(
        self, texts: list[str], db: Path, model: str | Path = "tiny-qwen3", engine: ScriptedEngine | None = None
    ) -> None:
        tokenizer = load_tokenizer(model)
        # Claude Code sends ~16.6k tiny-qwen3 tokens
        self.engine = engine or ScriptedEngine.from_texts(tokenizer, texts, max_context=131072)
        self.store = SqlStore(f"sqlite:///{db}")
        spec = policy_spec(model)
        app = create_app(
            ProxyConfig(), self.engine, self.store, tokenizer, tool_call_format=spec.tool_call_format
        )
        self.server = ServerThread(app)

    def __enter__(self) -> Proxy:
        self.url = self.server.start()
        return self

    def register(self, harness: str, task_id: str) -> tuple[str, str]:
        run = self.store.create_run("harness-e2e")
        rollout = self.store.register_rollouts(
            run.id, [RolloutSpec(group_id="g", task_id=task_id, harness=harness)]
        )[0]
        return rollout.rollout_id, rollout.token

    def __exit__(self, *exc) -> None:
        self.server.stop()
        self.store.close()


def mini_task(family: str, tmp_path: Path, phrasing: str):
    """The first held-out task of `family` worded as `phrasing` (a prefix: the tests read names off it)."""
    return next(
        t
        for t in load_tasks(mini_suite_dir(tmp_path / "suite"), split="test")
        if t.metadata["family"] == family and t.instruction.startswith(phrasing)
    )


def make_dir_in_fences(tmp_path: Path):
    """A make_dir task and mini-swe-agent text-mode replies that solve it: act, then submit."""
    task = mini_task("make_dir", tmp_path, "Make a directory named ")
    name = task.instruction.removeprefix("Make a directory named ").rstrip(".")
    fence = "THOUGHT: {}\n\n```mswea_bash_command\n{}\n```"
    return task, [
        fence.format("Make it.", f"mkdir {name}"),
        fence.format("Done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]


def run_scripted(adapter, task, texts: list[str], tmp_path: Path, backend, model: str | Path = "tiny-qwen3"):
    """One rollout of `task` through `adapter`, the policy answering `texts` in order: its outcome and calls."""
    with Proxy(texts, tmp_path / "store.db", model) as proxy:
        rollout_id, token = proxy.register(adapter.name, task.id)
        outcome = asyncio.run(
            run_task(adapter, task, backend, proxy_url=proxy.url, token=token, model="policy")
        )
        return outcome, proxy.store.list_calls(rollout_id)


def test_reference_harness_solves_a_mini_task_through_the_proxy(tmp_path, backend):
    """Fenced bash from the 'policy' runs in the sandbox; the verifier gives 1.0; both calls are recorded."""
    task = mini_task("write_word", tmp_path, "Create a file named ")
    path, word = task.instruction.split("named ")[1].split(" containing the text ")
    solution = f"```bash\necho {word.rstrip('.')} > {path}\n```"
    with Proxy([solution, "DONE"], tmp_path / "store.db") as proxy:
        rollout_id, token = proxy.register("reference", task.id)
        outcome = asyncio.run(
            run_task(
                get_harness("reference"), task, backend, proxy_url=proxy.url, token=token, model="policy"
            )
        )
        calls = proxy.store.list_calls(rollout_id)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output}"
    assert len(calls) == 2, "the acting call and the closing call are both in the store"
    assert calls[0].protocol in ("openai_chat", "chat_completions", "openai-chat"), (
        f"recorded as {calls[0].protocol}"
    )
    assert len(calls[1].prompt_ids) > len(calls[0].prompt_ids), (
        "the second prompt extends the first (history re-sent)"
    )


@pytest.mark.harness
@pytest.mark.slow
def test_mini_swe_agent_solves_a_mini_task_through_the_proxy(tmp_path, backend):
    """mini-swe-agent's bash tool calls (Qwen-style in the policy's text) run in the sandbox; it submits."""
    adapter = get_harness("mini-swe-agent")
    adapter.install()
    task = mini_task("make_dir", tmp_path, "Make a directory named ")
    name = task.instruction.removeprefix("Make a directory named ").rstrip(".")
    call = '<tool_call>\n{{"name": "bash", "arguments": {{"command": "{}"}}}}\n</tool_call>'
    texts = [call.format(f"mkdir {name}"), call.format("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")]
    outcome, calls = run_scripted(adapter, task, texts, tmp_path, backend)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
    assert len(calls) >= 2, f"both scripted turns went through the proxy: {len(calls)} calls"


def qwen3_coder_policy(folder: Path) -> Path:
    """A local HF folder: tiny-qwen3's config and tokenizer with Qwen3-Coder's published chat template."""
    tokenizer = load_tokenizer("tiny-qwen3")
    tokenizer.chat_template = None
    tokenizer.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (folder / "chat_template.jinja").write_text((TEMPLATES / "qwen3-coder.jinja").read_text())
    return folder


@pytest.mark.harness
@pytest.mark.slow
def test_mini_swe_agent_runs_a_qwen3_coder_tool_call_through_the_proxy(tmp_path, backend):
    """A policy whose template teaches Qwen3-Coder's XML calls: the proxy reads the scripted XML as an
    OpenAI `tool_calls` entry, the real mini-swe-agent CLI runs it in the sandbox, the verifier sees
    the directory, and the command's output comes back to the policy as a tool message."""
    adapter = get_harness("mini-swe-agent")
    adapter.install()
    policy = qwen3_coder_policy(tmp_path / "policy")
    assert policy_spec(policy).tool_call_format == "qwen3-coder", "the format is read off the template"
    task = mini_task("make_dir", tmp_path, "Make a directory named ")
    name = task.instruction.removeprefix("Make a directory named ").rstrip(".")
    call = "I'll run it.\n<tool_call>\n<function=bash>\n<parameter=command>\n{}\n</parameter>\n</function>\n</tool_call>"
    texts = [
        call.format(f"mkdir {name} && echo made-it"),
        call.format("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
    ]
    outcome, calls = run_scripted(adapter, task, texts, tmp_path, backend, model=policy)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
    message = calls[0].response["choices"][0]["message"]
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message["tool_calls"]
    ] == [("bash", {"command": f"mkdir {name} && echo made-it"})], (
        f"the XML call reached the harness as an OpenAI tool call: {message}"
    )
    assert message["content"] == "I'll run it.", "the text before the call stays text"
    tool_results = [m for m in calls[1].request["messages"] if m.get("role") == "tool"]
    assert tool_results and "made-it" in json.dumps(tool_results), "the command ran and its output came back"
    assert "<function>\n<name>bash</name>" in load_tokenizer(policy).decode(calls[0].prompt_ids), (
        "the prompt described the tools in Qwen3-Coder's template"
    )


@pytest.mark.harness
@pytest.mark.slow
def test_mini_swe_agent_in_text_mode_runs_a_fenced_command_through_the_proxy(tmp_path, backend):
    """Its text-based config: the command in a `mswea_bash_command` fence, no tool calls; it submits."""
    adapter = get_harness("mini-swe-agent", mode="text", max_tokens=96)
    adapter.install()
    task, texts = make_dir_in_fences(tmp_path)
    outcome, calls = run_scripted(adapter, task, texts, tmp_path, backend)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
    replies = [c.response["choices"][0]["message"]["content"] for c in calls]
    assert len(calls) == 2, f"one call to act, one to submit: {replies}"
    request = calls[0].request
    assert "mswea_bash_command" in request["messages"][0]["content"], "the text-based system prompt"
    assert not request.get("tools"), "no function tools in text mode"
    assert request["max_tokens"] == 96, "the reply cap the run set"


class OneAttemptMiniSweAgent(MiniSweAgent):
    """mini-swe-agent with `REQUEST_TIMEOUT` set and one attempt per call (its retries off)."""

    def __init__(self, request_timeout_s: float, **options) -> None:
        super().__init__(**options)
        self.request_timeout_s = request_timeout_s

    def env(self, ctx):
        return {**super().env(ctx), "REQUEST_TIMEOUT": str(self.request_timeout_s),
                "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}  # fmt: skip


@pytest.mark.harness
@pytest.mark.slow
def test_mini_swe_agents_direct_client_waits_as_long_as_litellm_would(tmp_path, backend):
    """Its OpenRouter classes give up on a call after a fixed 60 s; the direct client waits for
    `REQUEST_TIMEOUT` seconds instead, as litellm does: a slow call is answered under a long timeout
    and aborted under a short one, so the client's own timeout is the one in force."""
    task, texts = make_dir_in_fences(tmp_path)
    tokenizer = load_tokenizer("tiny-qwen3")
    seconds = {}
    for timeout_s, reward in ((60.0, 1.0), (1.0, 0.0)):
        adapter = OneAttemptMiniSweAgent(timeout_s, mode="text", max_tokens=96, client="direct")
        adapter.install()
        # each reply takes ~2-3 s to stream (0.1 s a token)
        engine = ScriptedEngine.from_texts(tokenizer, texts, max_context=131072, token_delay_s=0.1)
        (tmp_path / str(reward)).mkdir()
        with Proxy(texts, tmp_path / str(reward) / "store.db", engine=engine) as proxy:
            rollout_id, token = proxy.register(adapter.name, task.id)
            outcome = asyncio.run(
                run_task(adapter, task, backend, proxy_url=proxy.url, token=token, model="policy")
            )
            calls = proxy.store.list_calls(rollout_id)
        assert outcome.verdict.reward == reward, (
            f"{timeout_s}: {outcome.verdict.detail}\n{outcome.harness_output[-2000:]}"
        )
        seconds[timeout_s] = [c.latency_s for c in calls]
        if reward:
            assert [c.finish_reason for c in calls] == ["stop", "stop"], "both calls answered, none retried"
            assert min(seconds[timeout_s]) > 1.0, "each call took longer than the short timeout"
        else:
            assert [c.finish_reason for c in calls] == ["abort"], "the one attempt given up after 1 s"
            assert engine.aborted == 1
    assert seconds[1.0][0] < min(seconds[60.0]), "the short timeout cut the call before it was answered"


@pytest.mark.harness
@pytest.mark.slow
def test_mini_swe_agent_with_a_bash_fence_runs_it_only_where_fences_take_it(tmp_path, backend):
    """`fences: [mswea_bash_command, bash]`: the real CLI runs a ```bash block; as shipped it refuses it."""
    task = mini_task("make_dir", tmp_path, "Make a directory named ")
    name = task.instruction.removeprefix("Make a directory named ").rstrip(".")
    texts = [
        f"THOUGHT: Make it.\n\n```bash\nmkdir {name}\n```",
        "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```",
    ]
    for fences, reward in ((["mswea_bash_command", "bash"], 1.0), (None, 0.0)):
        adapter = get_harness(
            "mini-swe-agent", mode="text", max_tokens=96, fences=fences, limits=Limits(max_turns=2)
        )
        adapter.install()
        (tmp_path / str(reward)).mkdir()
        outcome, calls = run_scripted(adapter, task, texts, tmp_path / str(reward), backend)
        assert outcome.verdict.reward == reward, (
            f"{fences}: {outcome.verdict.detail}\n{outcome.harness_output[-2000:]}"
        )
        assert len(calls) == 2, f"{fences}: two replies, two calls"
        if fences is None:  # its format error comes back as the next prompt
            assert "mswea_bash_command" in calls[1].request["messages"][-1]["content"]


@pytest.mark.harness
@pytest.mark.slow
def test_claude_code_solves_a_mini_task_through_the_proxy(tmp_path, backend):
    """Claude Code's Write tool call (Qwen-style in the policy's text, Anthropic tool_use on the wire).

    Claude Code's system prompt and tools come to ~12.4k SmolLM2 (16.6k tiny-qwen3) tokens: the engine's context must hold them."""
    adapter = get_harness("claude-code")
    adapter.install()
    task = mini_task("write_word", tmp_path, "Create a file named ")
    path, word = (
        task.instruction.removeprefix("Create a file named ").rstrip(".").split(" containing the text ")
    )
    args = {"file_path": f"{task.workdir}/{path}", "content": word}
    texts = [f'<tool_call>\n{{"name": "Write", "arguments": {json.dumps(args)}}}\n</tool_call>', "Done."]
    with Proxy(texts, tmp_path / "store.db") as proxy:
        rollout_id, token = proxy.register(adapter.name, task.id)
        outcome = asyncio.run(
            run_task(adapter, task, backend, proxy_url=proxy.url, token=token, model="policy")
        )
        calls = proxy.store.list_calls(rollout_id)
    assert outcome.verdict.reward == 1.0, f"{outcome.verdict.detail}\n{outcome.harness_output[-3000:]}"
    assert {c.protocol for c in calls} == {calls[0].protocol} and len(calls) >= 2, (
        "all calls captured, one protocol"
    )
