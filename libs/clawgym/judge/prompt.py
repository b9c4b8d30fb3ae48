"""The judge's prompt: the task's instruction, the rubric's rules with their score levels, and the
evidence (the judged files, the harness's final output); the answer is asked for as one JSON object.

Deterministic for the same inputs, so a recorded prompt can be replayed against another judge.
"""

from __future__ import annotations

import json
from typing import Any

from clawgym.judge.evidence import Evidence
from clawgym.tasks.rubric import Rubric

SYSTEM = (
    "You are a strict, fair evaluator of an AI agent's work. You score the agent's output files "
    "against a rubric. Judge only what the files and the output show; do not assume work that is "
    "not there. Answer with one JSON object and nothing else."
)


def _level(option: float) -> str:
    return f"{option:g}"


def build_messages(instruction: str, rubric: Rubric, evidence: Evidence) -> list[dict[str, Any]]:
    """The chat messages sent to the judge."""
    options = ", ".join(_level(o) for o in rubric.score_options)
    rules = []
    for i, rule in enumerate(rubric.rules, 1):
        levels = "\n".join(f"    {level}: {text}" for level, text in rule.scores.items())
        target = f" (judges {rule.file_path})" if rule.file_path else ""
        rules.append(f"{i}. {rule.name}{target}\n{levels}")
    files = []
    for path, text in evidence.files.items():
        body = "(the agent did not write this file)" if text is None else text
        files.append(f"=== {path} ===\n{body}\n=== end of {path} ===")
    example = {"scores": {r.name: rubric.score_options[-1] for r in rubric.rules}, "reason": "..."}
    user = "\n\n".join(
        part
        for part in (
            f"## Task given to the agent\n{instruction.strip()}",
            f"## What you are shown\n{rubric.eval_input}" if rubric.eval_input else "",
            f"## Rubric\nScore every rule at one of: {options}.\n\n" + "\n\n".join(rules),
            "## The agent's output files\n" + ("\n\n".join(files) if files else "(none named by the rubric)"),
            f"## The agent's last answer\n{evidence.final_message.strip()}" if evidence.final_message.strip() else "",
            f"## The harness's final output (tail)\n{evidence.final_output.strip() or '(empty)'}",
            "## Answer\nReply with exactly one JSON object: a `scores` object mapping every rule name "
            f"above to its score, and a short `reason`. For example:\n{json.dumps(example)}",
        )
        if part
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
