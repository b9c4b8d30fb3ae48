"""`clawgym rollout --harness H --task DIR [--model SPEC]`: one task through one harness, shown whole.

Runs the task once through the embedded runtime (or the services a `-c` config names; one
orchestrator batch), then prints the rollout's outcome, every captured call (tokens in and out,
the context the harness added since the previous call, the policy's reply as decoded from its
exact output ids) and the prefix tree with shared and generated token counts
(`clawgym.trajectory.render`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from clawgym.errors import ClawgymError
from clawgym_app.config_options import set_option

if TYPE_CHECKING:
    import numpy as np

    from clawgym.config import ClawgymConfig
    from clawgym.orchestrator.interface import RolloutStatus
    from clawgym.records import Call


def command(
    harness: str = typer.Option(
        ..., "--harness", "-H", help="harness name (reference, mini-swe-agent, oracle, …)"
    ),
    task: str = typer.Option(..., "--task", "-t", help="a task folder, or a task id of --suite"),
    suite: str = typer.Option("mini", help="the suite a task id belongs to (ignored for a folder)"),
    model: str = typer.Option("", help="policy model spec (default trainer.model, else inference.model)"),
    config: Path = typer.Option(None, "--config", "-c", help="run config YAML; default: embedded defaults"),
    max_new_tokens: int = typer.Option(0, help="cap generated tokens per call (0 = the config's)"),
    temperature: float = typer.Option(None, help="force this sampling temperature (default: the request's)"),
    preview: int = typer.Option(600, help="characters of each call's text shown"),
    as_json: bool = typer.Option(False, "--json", help="print the rollout and its calls as one JSON object"),
    sets: list[str] = set_option(),
) -> None:
    """Run one task through one harness; print the captured calls and the prefix tree."""
    from clawgym.config import load_config

    console = Console(stderr=True) if as_json else Console()
    try:
        cfg = load_config(config, sets=sets)
        proxy = cfg.proxy.model_copy(
            update={
                **({"max_new_tokens": max_new_tokens} if max_new_tokens else {}),
                **({"temperature": temperature} if temperature is not None else {}),
            }
        )
        model = model or cfg.trainer.model or cfg.inference.model  # the default policy: inference.model's
        cfg = cfg.model_copy(
            update={"proxy": proxy, "trainer": cfg.trainer.model_copy(update={"model": model})}
        )
        shown = run_one(cfg, harness, task, suite, console)
    except ClawgymError as e:
        # one line (grep-able, whatever the terminal's width); the message may quote a file's text
        console.print(f"[red]clawgym rollout:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from e
    if as_json:
        print(json.dumps(shown.as_json()))
    else:
        show(shown, console, preview)
        if shown.status.state != "finished":
            console.print(Panel(shown.status.error or shown.status.state, title="rollout did not finish"))


# --- the run ---


@dataclass
class ShownRollout:
    """A rollout's final status, its captured calls and the tokenizer to decode them."""

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


def run_one(cfg: ClawgymConfig, harness: str, task: str, suite: str, console: Console) -> ShownRollout:
    """Runs `task` (a folder, or an id of `suite`) once through `harness` in a run of its own."""
    from clawgym.orchestrator.interface import Batch, RolloutRequest, collect
    from clawgym.preflight import check_suite, preflight
    from clawgym.tasks.suites import resolve_task
    from clawgym_app.logs import quiet_libraries

    quiet_libraries()
    suite, task_id = resolve_task(task, suite)
    check_suite(suite, "--suite")
    preflight(cfg, models=["trainer.model"], store="open_store")
    # torch and the rest only once the config passed: a refusal above comes in about a second
    from clawgym_app.runtime import Runtime

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


# --- printing ---


def _new_context(prev: Call | None, call: Call) -> np.ndarray:
    """The prompt tokens of `call` that do not continue the previous call's prompt + output."""
    import numpy as np

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
    from clawgym.records import is_teacher
    from clawgym.trainer.demonstrations import demonstrated
    from clawgym.trajectory import render_tree, tree_from_calls

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
    # a teacher's calls (demonstrations) have no policy logprobs: shown as SFT reads them
    tree = tree_from_calls([demonstrated(c) if is_teacher(c) else c for c in shown.calls], reward=s.reward)
    stats = tree.stats()
    console.print(
        f"prefix tree: {stats.path_tokens} path tokens, {stats.unique_tokens} unique "
        f"(shared {stats.path_tokens - stats.unique_tokens}), {stats.trainable_tokens} generated"
    )
    console.print(render_tree(tree, decode=lambda ids: tok.decode(list(ids))))


def _cut(text: str, n: int) -> str:
    from rich.markup import escape

    return escape(text if len(text) <= n else f"{text[: n // 2]} … {text[-n // 2 :]}")
