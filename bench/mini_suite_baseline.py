"""Base pass rate of the bundled policy (SmolLM2-135M-Instruct) on the mini suite, per task family.

For each test task: the reference harness's first request (its own system prompt and message
layout, rendered with the policy's chat template), one greedy reply and K sampled replies (T=1),
the first fenced bash block of each run in a fresh local sandbox holding the task's input files,
then the task's verifier. This is the harness's first turn only: a lower bound on what a full
multi-turn rollout scores.

    .venv/bin/python bench/mini_suite_baseline.py [--per-family 4] [--samples 4]

Prints a table per family; the LAST line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from clawgym.harnesses import reference_agent
from clawgym.models import load_model, load_tokenizer
from clawgym.sandbox import SandboxConfig, SandboxSpec, make_sandbox_backend
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir
from clawgym.tasks.model import Task
from clawgym.tasks.verify import prepare_workspace, verify


class FenceClosed:
    """Stops a row once its reply holds a closed fenced block (the harness ignores the rest)."""

    def __init__(self, tok, prompt_len: int) -> None:
        self.tok, self.prompt_len = tok, prompt_len

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tok.batch_decode(input_ids[:, self.prompt_len :], skip_special_tokens=True)
        return torch.tensor([t.count("```") >= 2 for t in texts], dtype=torch.bool)


def generate(model, tok, prompts: list[str], *, sample: bool, max_new_tokens: int, batch: int) -> list[str]:
    """Replies to chat-rendered prompts, `batch` at a time (left padding)."""
    replies: list[str] = []
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=sample,
                temperature=1.0 if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
                stopping_criteria=[FenceClosed(tok, enc.input_ids.shape[1])],
            )
        replies += tok.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
        print(
            f"generated {len(replies)}/{len(prompts)} ({'sampled' if sample else 'greedy'})",
            file=sys.stderr,
            flush=True,
        )
    return replies


async def score(backend, task: Task, reply: str) -> tuple[bool, float]:
    """(reply had a bash block, reward) after running the block in a fresh sandbox."""
    command = reference_agent.extract_action(reply)
    sandbox = await backend.create(
        SandboxSpec(workdir=task.workdir, mounts=task.sandbox_mounts(), network="none", timeout_s=120)
    )
    try:
        await prepare_workspace(task, sandbox)
        if command is not None:
            await sandbox.exec(["bash", "-c", command], timeout_s=10)
        verdict = await verify(task, sandbox)
        return command is not None, verdict.reward
    finally:
        await sandbox.destroy()


async def score_all(tasks: list[Task], replies: list[str], concurrency: int = 4) -> list[tuple[bool, float]]:
    backend = make_sandbox_backend(SandboxConfig())
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, reply: str) -> tuple[bool, float]:
        async with gate:
            return await score(backend, task, reply)

    try:
        return await asyncio.gather(*(one(t, r) for t, r in zip(tasks, replies, strict=True)))
    finally:
        await backend.close()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-family", type=int, default=4, help="test tasks per family")
    p.add_argument("--samples", type=int, default=3, help="sampled replies per task (T=1)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--show", action="store_true", help="print every reply")
    p.add_argument(
        "--replies",
        type=Path,
        default=None,
        help="JSON file of generated replies: reused if it exists (scoring only), else written",
    )
    args = p.parse_args()

    by_family: dict[str, list[Task]] = defaultdict(list)
    for task in load_tasks(mini_suite_dir(), split="test"):
        if len(by_family[task.metadata["family"]]) < args.per_family:
            by_family[task.metadata["family"]].append(task)
    tasks = [t for family in by_family.values() for t in family]

    if args.replies is not None and args.replies.is_file():
        saved = json.loads(args.replies.read_text())
        if (
            saved["task_ids"] != [t.id for t in tasks]
            or saved["system_prompt"] != reference_agent.SYSTEM_PROMPT
        ):
            raise SystemExit(f"{args.replies} holds replies for other tasks or another system prompt")
        greedy, sampled, gen_s = saved["greedy"], saved["sampled"], saved["generate_s"]
    else:
        torch.manual_seed(args.seed)
        tok = load_tokenizer("smollm2-135m")
        model = load_model("smollm2-135m", dtype=torch.bfloat16)
        prompts = [
            tok.apply_chat_template(
                reference_agent.build_messages(t.instruction), tokenize=False, add_generation_prompt=True
            )
            for t in tasks
        ]
        t0 = time.perf_counter()
        greedy = generate(
            model, tok, prompts, sample=False, max_new_tokens=args.max_new_tokens, batch=args.batch
        )
        sampled = generate(
            model,
            tok,
            [p for p in prompts for _ in range(args.samples)],
            sample=True,
            max_new_tokens=args.max_new_tokens,
            batch=args.batch,
        )
        gen_s = time.perf_counter() - t0
        if args.replies is not None:  # scoring can be redone without generating again
            args.replies.write_text(
                json.dumps(
                    {
                        "task_ids": [t.id for t in tasks],
                        "system_prompt": reference_agent.SYSTEM_PROMPT,
                        "greedy": greedy,
                        "sampled": sampled,
                        "generate_s": gen_s,
                    }
                )
            )
    sampled_tasks = [t for t in tasks for _ in range(args.samples)]
    results = asyncio.run(score_all(tasks + sampled_tasks, greedy + sampled))
    g_res, s_res = results[: len(tasks)], results[len(tasks) :]

    rows: dict[str, dict[str, float]] = {}
    for family, members in by_family.items():
        g = [r for t, r in zip(tasks, g_res, strict=True) if t.metadata["family"] == family]
        s = [r for t, r in zip(sampled_tasks, s_res, strict=True) if t.metadata["family"] == family]
        rows[family] = {
            "level": members[0].metadata["level"],
            "greedy": sum(r >= 1.0 for _, r in g) / len(g),
            "sampled": sum(r >= 1.0 for _, r in s) / len(s),
            "has_block": sum(b for b, _ in s) / len(s),
        }
    if args.show:
        for task, reply, (_, reward) in zip(tasks + sampled_tasks, greedy + sampled, results, strict=True):
            print(f"--- {task.id} reward={reward}: {task.instruction}\n{reply}")
    print(f"{'family':14} lvl  greedy  sampled  has_block")
    for family, row in rows.items():
        print(
            f"{family:14} {row['level']:>3}  {row['greedy']:6.2f}  {row['sampled']:7.2f}  {row['has_block']:9.2f}"
        )
    figures = {
        "tasks": len(tasks),
        "samples_per_task": args.samples,
        "greedy_pass": round(sum(r >= 1.0 for _, r in g_res) / len(g_res), 3),
        "sampled_pass": round(sum(r >= 1.0 for _, r in s_res) / len(s_res), 3),
        "sampled_has_block": round(sum(b for b, _ in s_res) / len(s_res), 3),
        "families_with_signal": sum(row["sampled"] > 0 for row in rows.values()),
        "families": len(rows),
        "generate_s": round(gen_s, 1),
        "per_family_sampled": {f: round(r["sampled"], 3) for f, r in rows.items()},
        "per_family_greedy": {f: round(r["greedy"], 3) for f, r in rows.items()},
    }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
