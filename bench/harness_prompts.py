"""Which harnesses' first prompt fits the policy's context: each CLI's first call, in the policy's tokens.

    .venv/bin/python bench/harness_prompts.py [--model smollm2-135m] [--harness NAME]… [--reply-tokens 40]

Each harness (the six real CLIs, mini-swe-agent in both of its modes, and the project's own
`reference`) is installed by the project's installer (`HarnessAdapter.install`: npm / PyPI into
`~/.cache/clawgym/harnesses`), then runs once on one held-out mini-suite task in a real local
sandbox, through the real proxy app (uvicorn on loopback, SQLite store) rendering with the
policy's tokenizer and chat template. A scripted engine plays the policy and answers every call
with the reply that ends that harness's run at once (plain text, or mini-swe-agent's submit
command), so the run makes the harness's first call and little else. Its context is 128k, so no
harness is refused here: the figures are what the policy's context would have to hold.

Measured, per harness, from the store: `prompt_tokens` is the recorded `prompt_ids` length of the
run's longest call (the agent's first call: opencode first asks for a title, a call with a short
prompt of its own; `calls` counts them all). Its split, by rendering the call's canonical
conversation (the proxy's own parse of the recorded request) with the proxy's `ChatTemplate`:
`tools_tokens` = the full render less the render without the tools (for a template without tool
support, as SmolLM2's, the proxy writes the tool definitions into the system prompt itself);
`system_tokens` = the render without tools less the same with every system message's text
emptied (Codex's `developer` instructions are system messages here); `other_tokens` = the rest:
the template's markup, the task, and what a harness adds as user text (Claude Code's
`<system-reminder>` blocks, OpenClaw's internal context). The three add up to `prompt_tokens`
when the render from scratch is the recorded prompt (`rendered_tokens` says; it is, for a first
call with nothing to splice). `fits`: prompt + `--reply-tokens` (default: the quickstart's
per-call cap, 40; `proxy.max_new_tokens` defaults to 0, no cap) within the policy's context
(`max_position_embeddings`); `context_needed` is that sum. A harness that fails to install or
to run gets `{"error": …}`.

Measured 2026-12-05 on a 2-core AMD EPYC beside other jobs (the adapters' pinned CLI versions; prompt
tokens in SmolLM2-135M's tokenizer, context 8,192, reply room 40; the last column is the same
prompt in tiny-qwen3's 4,096-entry vocabulary, `--model tiny-qwen3`):

| harness | prompt | system | tools (n) | other | fits 8k | context needed | tiny-qwen3 |
| --- | --- | --- | --- | --- | --- | --- | --- |
| reference | 277 | 60 | 0 | 217 | yes | 317 | 332 |
| mini-swe-agent | 1,014 | 12 | 174 (1) | 828 | yes | 1,054 | 1,257 |
| mini-swe-agent:text | 820 | 130 | 0 | 690 | yes | 860 | 1,023 |
| opencode | 7,710 | 2,179 | 5,504 (10) | 27 | yes | 7,750 | 9,905 |
| openclaw | 8,893 | 5,965 | 2,641 (11) | 287 | no | 8,933 | 12,059 |
| codex | 9,124 | 4,402 | 4,580 (12) | 142 | no | 9,164 | 12,787 |
| claude-code | 12,366 | 3,884 | 8,302 (12) | 180 | no | 12,406 | 16,609 |
| qwen-code | 18,287 | 6,118 | 9,633 (14) | 2,536 | no | 18,327 | 25,150 |

(reference's and mini-swe-agent's "other" is mostly their worked examples and instructions in
user/assistant turns; opencode's call is its second, after a 595-token title call.)

The last line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from clawgym.harnesses.base import HarnessAdapter
from clawgym.harnesses.registry import get_harness
from clawgym.inference.scripted import ScriptedEngine
from clawgym.orchestrator.attempt import run_task
from clawgym.policies import SMOLLM2_135M, load_tokenizer, policy_spec, resolve_model
from clawgym.protocols.anthropic_messages import AnthropicMessages
from clawgym.protocols.conversation import Conversation, Message
from clawgym.protocols.openai_chat import OpenAIChat
from clawgym.protocols.openai_responses import OpenAIResponses
from clawgym.proxy.app import create_app
from clawgym.proxy.config import ProxyConfig
from clawgym.proxy.serving import ServerThread
from clawgym.records import Call, RolloutSpec
from clawgym.rendering.template import ChatTemplate
from clawgym.sandbox import SandboxConfig, make_sandbox_backend
from clawgym.store.sql import SqlStore
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir

QUICKSTART_REPLY_TOKENS = 40  # clawgym_app.commands.quickstart.Quickstart.max_new_tokens
ENGINE_CONTEXT = 131072  # the scripted engine refuses no harness: Claude Code's first prompt is ~20k
TEXT = "Done."
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
PROTOCOLS = {p.name: p for p in (AnthropicMessages(), OpenAIChat(), OpenAIResponses())}


@dataclass(frozen=True)
class Entry:
    """One harness as measured: its registry name, constructor options and the reply ending its run."""

    name: str
    reply: str = TEXT
    options: dict[str, Any] = field(default_factory=dict)


ENTRIES = {
    "reference": Entry("reference", "DONE"),
    "mini-swe-agent": Entry(
        "mini-swe-agent",
        f'<tool_call>\n{{"name": "bash", "arguments": {{"command": "{SUBMIT}"}}}}\n</tool_call>',
    ),
    "mini-swe-agent:text": Entry(
        "mini-swe-agent", f"THOUGHT: Done.\n\n```mswea_bash_command\n{SUBMIT}\n```", {"mode": "text"}
    ),
    "claude-code": Entry("claude-code"),
    "codex": Entry("codex"),
    "openclaw": Entry("openclaw"),
    "opencode": Entry("opencode"),
    "qwen-code": Entry("qwen-code"),
}


def policy_context(model: str) -> int:
    """The policy's context: `max_position_embeddings` of its resolved folder (what the torch engine serves)."""
    config = json.loads((Path(resolve_model(model)) / "config.json").read_text())
    return int(config["max_position_embeddings"])


class Proxy:
    """The real proxy app on 127.0.0.1:<free port> in a thread, rendering as policy `model`, the
    scripted engine answering `reply` to every call."""

    def __init__(self, model: str, reply: str, db: Path) -> None:
        tokenizer = load_tokenizer(model)
        spec = policy_spec(model)
        self.engine = ScriptedEngine.from_texts(tokenizer, [reply], max_context=ENGINE_CONTEXT)
        self.store = SqlStore(f"sqlite:///{db}")
        app = create_app(
            ProxyConfig(),
            self.engine,
            self.store,
            tokenizer,
            supports_tools=spec.supports_tools,
            tool_call_format=spec.tool_call_format,
        )
        self.server = ServerThread(app)

    def __enter__(self) -> Proxy:
        self.url = self.server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()
        self.store.close()


def split(call: Call, template: ChatTemplate) -> dict[str, int]:
    """The call's prompt split into system text, tool definitions and the rest, by rendering its
    canonical conversation from scratch with and without each part (see the module's doc)."""
    conv: Conversation = PROTOCOLS[call.protocol].parse(call.request).conversation

    def tokens(messages: tuple[Message, ...], tools: tuple) -> int:
        return len(template.encode(template.render(messages, tools, add_generation_prompt=True)))

    full = tokens(conv.messages, conv.tools)
    no_tools = tokens(conv.messages, ())
    emptied = tuple(replace(m, content="") if m.role == "system" else m for m in conv.messages)
    no_system = tokens(emptied, ())
    return {
        "rendered_tokens": full,
        "system_tokens": no_tools - no_system,
        "tools_tokens": full - no_tools,
        "other_tokens": no_system,
        "tools": len(conv.tools),
    }


def measure_one(
    label: str, model: str, task, backend, work: Path, context: int, reply_tokens: int, timeout_s: float
) -> dict[str, Any]:
    """Installs and runs harness `label` once; its first call's figures, or `{"error": …}`."""
    entry = ENTRIES[label]
    t0 = time.monotonic()
    try:
        probe: HarnessAdapter = get_harness(entry.name, **entry.options)
        adapter = get_harness(
            entry.name, limits=replace(probe.limits, timeout_s=timeout_s, max_turns=1), **entry.options
        )
        adapter.install()
    except Exception as e:  # a registry or network failure is a finding, not a crash
        return {"error": f"install: {type(e).__name__}: {str(e)[-600:]}"}
    install_s = time.monotonic() - t0
    folder = work / label.replace(":", "-")
    folder.mkdir(parents=True)
    try:
        with Proxy(model, entry.reply, folder / "store.db") as proxy:
            run = proxy.store.create_run("harness-prompts")
            rollout = proxy.store.register_rollouts(
                run.id, [RolloutSpec(group_id="g", task_id=task.id, harness=adapter.name)]
            )[0]
            t1 = time.monotonic()
            outcome = asyncio.run(
                run_task(adapter, task, backend, proxy_url=proxy.url, token=rollout.token, model="policy")
            )
            run_s = time.monotonic() - t1
            calls = proxy.store.list_calls(rollout.rollout_id)
    except Exception as e:
        return {"error": f"run: {type(e).__name__}: {str(e)[-600:]}"}
    if not calls:
        tail = (outcome.harness_output or "")[-600:]
        return {"error": f"no model call reached the proxy ({outcome.verdict.detail}): {tail}"}
    first = max(calls, key=lambda c: len(c.prompt_ids))
    prompt = len(first.prompt_ids)
    template = ChatTemplate(load_tokenizer(model), policy_spec(model).supports_tools)
    return {
        "prompt_tokens": prompt,
        **split(first, template),
        "fits": prompt + reply_tokens <= context,
        "context_needed": prompt + reply_tokens,
        "calls": len(calls),
        "call_seq": first.seq,
        "protocol": first.protocol,
        "install_s": round(install_s, 1),
        "run_s": round(run_s, 1),
    }


def measure(
    labels: list[str],
    model: str = SMOLLM2_135M,
    reply_tokens: int = QUICKSTART_REPLY_TOKENS,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """The figures of each harness in `labels` (keys of ENTRIES), as the JSON line reports them."""
    context = policy_context(model)
    with tempfile.TemporaryDirectory(prefix="harness-prompts-") as tmp:
        work = Path(tmp)
        task = next(
            t
            for t in load_tasks(mini_suite_dir(work / "suite"), split="test")
            if t.metadata["family"] == "write_word"
        )
        cfg = SandboxConfig()
        cfg.local.root_dir = str(work / "sandboxes")
        backend = make_sandbox_backend(cfg)
        try:
            results = {
                label: measure_one(label, model, task, backend, work, context, reply_tokens, timeout_s)
                for label in labels
            }
        finally:
            asyncio.run(backend.close())
    measured = {k: v for k, v in results.items() if "error" not in v}
    return {
        "policy": model,
        "context": context,
        "reply_tokens": reply_tokens,
        "task": task.id,
        "harnesses": results,
        "fit": [k for k, v in measured.items() if v["fits"]],
        "do_not_fit": [k for k, v in measured.items() if not v["fits"]],
        "failed": [k for k, v in results.items() if "error" in v],
    }


def table(report: dict[str, Any]) -> str:
    rows = [
        f"policy {report['policy']}: context {report['context']} tokens, reply room {report['reply_tokens']}",
        "| harness | prompt | system | tools (n) | other | fits | context needed |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, r in report["harnesses"].items():
        if "error" in r:
            rows.append(f"| {label} | error: {r['error'][:120]} | | | | | |")
            continue
        rows.append(
            f"| {label} | {r['prompt_tokens']} | {r['system_tokens']} | {r['tools_tokens']} ({r['tools']}) "
            f"| {r['other_tokens']} | {'yes' if r['fits'] else 'no'} | {r['context_needed']} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=SMOLLM2_135M, help="the policy whose tokens and context count")
    parser.add_argument(
        "--harness", action="append", choices=list(ENTRIES), help="measure only these (repeatable)"
    )
    parser.add_argument(
        "--reply-tokens", type=int, default=QUICKSTART_REPLY_TOKENS, help="room a reply needs in the context"
    )
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per harness run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    report = measure(args.harness or list(ENTRIES), args.model, args.reply_tokens, args.timeout_s)
    print(table(report))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
