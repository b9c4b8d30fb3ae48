"""A trivially learnable suite and a warm-started tiny policy for end-to-end training tests.

The suite: every task asks for the same fixed short action (`touch ok.txt`), checked by its
verifier. A random tiny-qwen3 never writes a fenced shell block, so it would get no reward signal;
`warm_start` fine-tunes it (plain next-token SFT, a few seconds) on the reference harness's exact
first prompt of each task, half towards the right block and half towards a wrong one
(`touch no.txt`). The warm policy then passes about half of its samples: GRPO has signal, and
"the reward moved up" means the policy learned to prefer the right action.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

RIGHT = "```bash\ntouch ok.txt\n```"
WRONG = "```bash\ntouch no.txt\n```"
INSTRUCTIONS = (
    "Create the file ok.txt.",
    "Make a new empty file called ok.txt.",
    "Please create ok.txt in this directory.",
    "Touch the file ok.txt.",
    "We need a file named ok.txt; create it.",
    "Create an empty file ok.txt here.",
)
REWARD_SH = """#!/usr/bin/env bash
cd "${1:-.}" || { echo 0.0; exit 0; }
if [ -f ok.txt ]; then echo 1.0; else echo 0.0; fi
"""


def write_suite(root: Path, test_tasks: int = 2) -> Path:
    """ClawGym-format tasks under root/: the last `test_tasks` instructions are the test split."""
    for i, instruction in enumerate(INSTRUCTIONS):
        split = "test" if i >= len(INSTRUCTIONS) - test_tasks else "train"
        task = root / f"ok-{split}-{i}"
        (task / "reward").mkdir(parents=True)
        (task / "solution").mkdir()
        entry = {"id": task.name, "user_query": instruction, "split": split, "family": "touch_ok"}
        (task / "data_entry.json").write_text(json.dumps(entry))
        (task / "reward" / "reward.sh").write_text(REWARD_SH)
        (task / "solution" / "solve.sh").write_text("#!/usr/bin/env bash\ntouch ok.txt\n")
    return root


def warm_start(prompts: list[list[int]], tokenizer, out: Path, steps: int = 120, lr: float = 1e-3) -> Path:
    """tiny-qwen3 fine-tuned to answer each prompt with RIGHT or WRONG equally often; saved to `out`."""
    from clawgym.policies import load_model

    torch.manual_seed(0)
    model = load_model("tiny-qwen3").train()
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    targets = [[*tokenizer.encode(t, add_special_tokens=False), end] for t in (RIGHT, WRONG)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    for step in range(steps):
        prompt = prompts[step % len(prompts)]
        optimizer.zero_grad()
        for target in targets:  # one step on both answers: each ends up about equally likely
            ids = torch.tensor([prompt + target])
            labels = ids.clone()
            labels[0, : len(prompt)] = -100  # learn the reply only
            model(input_ids=ids, labels=labels).loss.backward()
        optimizer.step()
    model.eval()
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
