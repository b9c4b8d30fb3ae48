"""Base pass rate of the bundled policy (SmolLM2-135M-Instruct) on the mini suite, per task family.

For each test task: the reference harness's first request (its own system prompt, worked example
and message layout, rendered with the policy's chat template), one greedy reply and K sampled
replies per temperature (no top-p/top-k),
the first fenced bash block of each run in a fresh local sandbox holding the task's input files,
then the task's verifier. This is the harness's first turn only: a lower bound on what a full
multi-turn rollout scores.

    .venv/bin/python bench/mini_suite_baseline.py [--per-family 3] [--temperatures 0.7,1.0] [--samples 2]
        [--examples harness|none|leaky] [--max-level 2]

`--examples` chooses the worked examples before the task: the harness's own (`harness`, which share
no program with any solution of the suite), none, or `leaky`: the examples the harness had until
#17 (`echo hello > greeting.txt` and `tail -n 2 notes.md`, the answer shapes of three families),
kept here only to measure what such a leak is worth.

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
from clawgym.policies import load_model, load_tokenizer
from clawgym.sandbox import SandboxConfig, SandboxSpec, make_sandbox_backend
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.generate import mini_suite_dir
from clawgym.tasks.model import Task
from clawgym.tasks.verify import prepare_workspace, verify

LEAKY_EXAMPLES = [
    {"role": "user", "content": "Write the word hello into the file greeting.txt."},
    {"role": "assistant", "content": "```bash\necho hello > greeting.txt\n```"},
    {"role": "user", "content": "Output (exit code 0):\n(no output)"},
    {"role": "assistant", "content": "DONE"},
    {"role": "user", "content": "Show the last 2 lines of the file notes.md."},
    {"role": "assistant", "content": "```bash\ntail -n 2 notes.md\n```"},
    {"role": "user", "content": "Output (exit code 0):\nbuy milk\ncall Sam"},
    {"role": "assistant", "content": "DONE"},
]


def first_request(instruction: str, examples: str) -> list[dict]:
    """The harness's first request's messages, with the worked examples `examples` names."""
    messages = reference_agent.build_messages(instruction, examples=examples == "harness")
    return messages[:1] + LEAKY_EXAMPLES + messages[1:] if examples == "leaky" else messages


class FenceClosed:
    """Stops a row once its reply holds a closed fenced block (the harness ignores the rest)."""

    def __init__(self, tok, prompt_len: int) -> None:
        self.tok, self.prompt_len = tok, prompt_len

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tok.batch_decode(input_ids[:, self.prompt_len :], skip_special_tokens=True)
        return torch.tensor([t.count("```") >= 2 for t in texts], dtype=torch.bool)


def generate(
    model, tok, prompts: list[str], *, temperature: float | None, max_new_tokens: int, batch: int
) -> list[str]:
    """Replies to chat-rendered prompts, `batch` at a time (left padding); temperature None = greedy."""
    replies: list[str] = []
    for i in range(0, len(prompts), batch):
        enc = tok(prompts[i : i + batch], return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=temperature is not None,
                temperature=temperature,
                top_p=None,
                top_k=None,
                pad_token_id=tok.pad_token_id,
                stopping_criteria=[FenceClosed(tok, enc.input_ids.shape[1])],
            )
        replies += tok.batch_decode(out[:, enc.input_ids.shape[1] :], skip_special_tokens=True)
        print(
            f"generated {len(replies)}/{len(prompts)} (T={temperature or 'greedy'})",
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
    p.add_argument("--per-family", type=int, default=3, help="test tasks per family")
    p.add_argument("--temperatures", default="0.7,1.0", help="sampling temperatures (greedy always runs)")
    p.add_argument("--samples", type=int, default=2, help="sampled replies per task and temperature")
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--examples", choices=("harness", "none", "leaky"), default="harness")
    p.add_argument("--max-level", type=int, default=0, help="only families up to this level (0 = all)")
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
        if args.max_level and int(task.metadata["level"]) > args.max_level:
            continue
        if len(by_family[task.metadata["family"]]) < args.per_family:
            by_family[task.metadata["family"]].append(task)
    tasks = [t for family in by_family.values() for t in family]
    # one run per (mode, task, sample); "greedy" runs once per task
    modes = ["greedy", *(f"T{float(t):g}" for t in args.temperatures.split(",") if t)]
    runs = [(m, t) for m in modes for t in tasks for _ in range(1 if m == "greedy" else args.samples)]
    key = {
        "task_ids": [t.id for t in tasks],
        "messages": first_request("{task}", args.examples),
        "modes": modes,
    }

    if args.replies is not None and args.replies.is_file():
        saved = json.loads(args.replies.read_text())
        if saved["key"] != key or len(saved["replies"]) != len(runs):
            raise SystemExit(f"{args.replies} holds replies for other tasks, prompts or modes")
        replies, gen_s = saved["replies"], saved["generate_s"]
    else:
        torch.manual_seed(args.seed)
        tok = load_tokenizer("smollm2-135m")
        model = load_model("smollm2-135m", dtype=torch.bfloat16)
        prompt = {
            t.id: tok.apply_chat_template(
                first_request(t.instruction, args.examples), tokenize=False, add_generation_prompt=True
            )
            for t in tasks
        }
        t0 = time.perf_counter()
        replies = []
        for mode in modes:
            todo = [prompt[t.id] for m, t in runs if m == mode]
            temperature = None if mode == "greedy" else float(mode[1:])
            replies += generate(
                model,
                tok,
                todo,
                temperature=temperature,
                max_new_tokens=args.max_new_tokens,
                batch=args.batch,
            )
        gen_s = time.perf_counter() - t0
        if args.replies is not None:  # scoring can be redone without generating again
            args.replies.write_text(json.dumps({"key": key, "replies": replies, "generate_s": gen_s}))

    results = asyncio.run(score_all([t for _, t in runs], replies))
    passed: dict[str, dict[str, list[bool]]] = {m: defaultdict(list) for m in modes}
    blocks: dict[str, list[bool]] = {m: [] for m in modes}
    for (mode, task), (has_block, reward) in zip(runs, results, strict=True):
        passed[mode][task.metadata["family"]].append(reward >= 1.0)
        blocks[mode].append(has_block)
    if args.show:
        for (mode, task), reply, (_, reward) in zip(runs, replies, results, strict=True):
            print(f"--- {mode} {task.id} reward={reward}: {task.instruction}\n{reply}")

    rate = lambda xs: round(sum(xs) / len(xs), 3) if xs else 0.0  # noqa: E731
    print(f"{'family':20} lvl split   " + "".join(f"{m:>8}" for m in modes))
    for family, members in by_family.items():
        cells = "".join(f"{rate(passed[m][family]):8.2f}" for m in modes)
        meta = members[0].metadata
        print(f"{family:20} {meta['level']:>3} {meta.get('family_split', ''):7} {cells}")
    figures: dict[str, object] = {
        "examples": args.examples,
        "tasks": len(tasks),
        "samples_per_task": args.samples,
        "generate_s": round(gen_s, 1),
    }
    for mode in modes:
        figures[f"pass_{mode}"] = rate([x for xs in passed[mode].values() for x in xs])
        figures[f"has_block_{mode}"] = rate(blocks[mode])
        figures[f"families_with_signal_{mode}"] = sum(any(xs) for xs in passed[mode].values())
    for mode in modes:
        figures[f"per_family_{mode}"] = {f: rate(xs) for f, xs in passed[mode].items()}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
