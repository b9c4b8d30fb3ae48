"""Runs one rollout and shows it: calls with their tokens, the context each call added, the tree.

Owns what `clawgym rollout` prints; the run itself is one orchestrator batch on a `Runtime`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from clawgym.config import ClawgymConfig
from clawgym.orchestrator.interface import Batch, RolloutRequest, RolloutStatus, collect
from clawgym.store.records import Call
from clawgym.trajectory import render_tree, tree_from_calls
from clawgym_app.logs import quiet_libraries
from clawgym_app.runtime import Runtime


@dataclass
class ShownRollout:
    status: RolloutStatus
    calls: list[Call]
    tokenizer: Any
    run_id: str

    def as_json(self) -> dict:
        s = self.status
        return {
            "run_id": self.run_id,
            "rollout_id": s.rollout_id,
            "task_id": s.task_id,
            "harness": s.harness,
            "state": s.state,
            "reward": s.reward,
            "passed": s.passed,
            "error": s.error,
            "calls": [
                {
                    "seq": c.seq,
                    "protocol": c.protocol,
                    "prompt_tokens": len(c.prompt_ids),
                    "output_tokens": len(c.output_ids),
                    "finish_reason": c.finish_reason,
                    "policy_version": c.policy_version,
                    "temperature": c.temperature,
                    "latency_s": c.latency_s,
                    "output_text": self.tokenizer.decode(c.output_ids.tolist()),
                }
                for c in self.calls
            ],
        }


def resolve_task(task: str, suite: str) -> tuple[str, str]:
    """(suite, task id): a task folder is a suite of one task; otherwise `task` is an id of `suite`."""
    from clawgym.tasks.loader import load_task

    path = Path(task)
    if path.is_dir():
        return str(path.resolve()), load_task(path).id
    return suite, task


def run_one(cfg: ClawgymConfig, harness: str, task: str, suite: str, console: Console) -> ShownRollout:
    quiet_libraries()
    suite, task_id = resolve_task(task, suite)
    with console.status(f"starting the runtime ({cfg.trainer.model})"):
        runtime = Runtime.open(cfg)
    with runtime:
        run = runtime.store.create_run("rollout", {"kind": "rollout", "harness": harness, "task": task_id})
        batch = Batch(run.id, [RolloutRequest(task_id, harness, 1)], suite=suite, proxy_url=runtime.proxy_url)
        with console.status(f"{task_id} through {harness}"):
            finals = runtime.loop.run(collect(runtime.rollouts, batch))
        final = [s for s in finals if not s.retrying][-1]
        calls = runtime.store.list_calls(final.rollout_id)
        return ShownRollout(final, calls, runtime.tokenizer, run.id)


def _new_context(prev: Call | None, call: Call) -> np.ndarray:
    """The prompt tokens of `call` that do not continue the previous call's prompt + output."""
    if prev is None:
        return call.prompt_ids
    before = np.concatenate([prev.prompt_ids, prev.output_ids])
    n = min(len(before), len(call.prompt_ids))
    diverge = (
        int(np.argmax(before[:n] != call.prompt_ids[:n])) if (before[:n] != call.prompt_ids[:n]).any() else n
    )
    return call.prompt_ids[diverge:]


def show(shown: ShownRollout, console: Console, preview: int = 600) -> None:
    """Prints the outcome, each call, and the rollout's prefix tree."""
    s, tok = shown.status, shown.tokenizer
    reward = "—" if s.reward is None else f"{s.reward:g}"
    console.print(f"[bold]{s.task_id}[/bold] through [bold]{s.harness}[/bold]: {s.state}, reward {reward}, "
                  f"passed {s.passed} · rollout {s.rollout_id} · run {shown.run_id}")  # fmt: skip
    if not shown.calls:
        console.print("no model calls were captured (a pseudo-harness, or the harness failed before calling)")
        return
    table = Table(title="captured calls")
    for column in (
        "seq",
        "protocol",
        "prompt tok",
        "new context tok",
        "output tok",
        "finish",
        "version",
        "T",
        "latency",
    ):
        table.add_column(column)
    prev = None
    for c in shown.calls:
        table.add_row(str(c.seq), c.protocol, str(len(c.prompt_ids)), str(len(_new_context(prev, c))),
                      str(len(c.output_ids)), c.finish_reason, str(c.policy_version),
                      "-" if c.temperature is None else f"{c.temperature:g}", f"{c.latency_s:.2f} s")  # fmt: skip
        prev = c
    console.print(table)
    prev = None
    for c in shown.calls:
        context = tok.decode(_new_context(prev, c).tolist())
        output = tok.decode(c.output_ids.tolist())
        body = f"[dim]context added ({len(_new_context(prev, c))} tok):[/dim]\n{_cut(context, preview)}\n\n"
        body += f"[green]policy output ({len(c.output_ids)} tok):[/green]\n{_cut(output, preview)}"
        console.print(Panel(body, title=f"call {c.seq}", expand=False, highlight=False))
        prev = c
    tree = tree_from_calls(shown.calls, reward=s.reward)
    stats = tree.stats()
    console.print(
        f"prefix tree: {stats.path_tokens} path tokens, {stats.unique_tokens} unique "
        f"(shared {stats.path_tokens - stats.unique_tokens}), {stats.trainable_tokens} generated"
    )
    console.print(render_tree(tree, decode=lambda ids: tok.decode(list(ids))))


def _cut(text: str, n: int) -> str:
    from rich.markup import escape

    return escape(text if len(text) <= n else f"{text[: n // 2]} … {text[-n // 2 :]}")
