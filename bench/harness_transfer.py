"""Does a gain carry from one harness to another? Train through the reference harness, through
mini-swe-agent and through their mix; evaluate each policy and the base policy through both
(issue #17, part 5).

Three `clawgym train` runs from the quickstart's config (SmolLM2-135M on the mini suite, levels
1-2; same steps, batch, learning rate, seed), differing only in `trainer.harnesses`: reference,
mini-swe-agent, and both at equal weight (a GRPO group is one task through one harness). The runs
do not evaluate themselves (`evaluation.at_start/at_end` off); instead `clawgym eval -c <run>/config.yaml
--checkpoint V --harness reference --harness mini-swe-agent` evaluates the base policy (v0) and each
final policy on the same held-out tasks with the same settings (`orchestrator.harness_settings` of
both harnesses in every config), all recorded in one results store (`<out>/evals.db`). The matrix:
policy × evaluation harness, Pass@1 with its 95% interval and the paired difference from the base
policy, for held-out instances of the trained families and for unseen families; `<out>/transfer.png`
draws it (bars with 95% intervals, one panel per held-out part).

mini-swe-agent (PyPI, pinned) installs into ~/.cache/clawgym/harnesses on first use. It runs in
its text-based mode by default (`--swe-mode text`: its own `mini_textbased.yaml`, one fenced
`mswea_bash_command` block per reply), the form it ships for models without tool calling: its
tool mode wants a `bash` function call that a 135M policy never wrote in 48 replies (measured,
SmolLM2 base, 16 tasks). Its prompt is its own (~800 tokens of workflow and examples), its
answer fence differs from the reference harness's ```bash: the question is whether a gain in
one carries to the other.

    .venv/bin/python bench/harness_transfer.py           # the warm-started matrix: 3 chains, 48 + 48 eval tasks
    .venv/bin/python bench/harness_transfer.py --small   # the mini-swe-agent chain, 24 + 24 eval tasks
    .venv/bin/python bench/harness_transfer.py --toy     # tiny-qwen3, 2 steps per run: the plumbing (~4 min)

`--harnesses A B` trains and evaluates through another pair (default `reference mini-swe-agent`;
`--small` is then B's chain): `--harnesses reference opencode --trainings opencode` is the warm-
started pipeline through opencode, evaluated through it and the reference harness. `--concurrency
H=N` sets rollouts at once through a harness (default: a step's; opencode's CLI costs ~20 s of CPU a
run, so 8 at a time on 2 cores) and `--set KEY=VALUE` a config field of every run (over opencode's
7.7k-token prompt, `--set trainer.micro_batch_tokens=16384` packs a step's tree as one slice: at
8192 each slice computes the prompt again, 3x slower, `bench/sft_budget.py`). That pipeline's command
and its table (65 minutes on 2 cores; opencode's tool calls learnt, Pass@1 through it 0/16 -> 2/16
within its interval): `docs/performance.md`, harness prompts. A rerun into the same `--out` keeps its
demonstrations (`<out>/demonstrations/capture.json`).

By default every run starts warm (`--warm-start`, below): from the base policy nothing is learnt
through mini-swe-agent. `--no-warm-start` trains from the base policy, as first measured:
`--no-warm-start --steps 24 --swe-turns 4` (24 steps of 4 groups x 8 per run) does not fit a
2-core machine in a session: started there (SmolLM2, 2 cores), the base policy's 96
reference-harness rollouts took 83 s, its 96 mini-swe-agent rollouts ~55 s each at 4 at a time (3
calls of ~1,100 prompt and ~55 output tokens; each start imports litellm, ~5 s of CPU), so about 20
minutes for one evaluation and some 3 hours for the 768 + 384 training rollouts through
mini-swe-agent. `--no-warm-start --steps 4 --groups-per-step 2 --group-size 4 --eval-tasks 12
--eval-unseen-tasks 12 --swe-turns 2` took 22.8 min on 2 cores.
Measured at that small scale (2 AVX2 cores): no cell beyond its interval; every policy 0/24
through mini-swe-agent, whose groups had reward 0 at every step (its fence written in 1 of 192
replies), so its format has to be learnable first (SFT, or a larger policy).
Widening its parser to ```bash (`--swe-fences mswea_bash_command bash`, `--swe-max-tokens 192`)
did not change that (measured with `clawgym eval` on the same settings, 12 + 12 tasks, 2 calls a
rollout): the base policy 0/24 and the quickstart's policy after 13 steps through the reference
harness (0.031 -> 0.208 there) 0/24; a ```bash block in 9 and 7 of 48 replies, none doing the task.
A stronger policy, the quickstart's after 60 steps (seed 1, a3a240d: 0.073 -> 0.458 on trained
families), on 24 tasks of families it had learnt (12 of 6 trained families, 12 of make_dir and
move_into_dir), the same settings: through the reference harness 0.167 (base) -> 0.833, through
mini-swe-agent 0/24 -> 0/24; its replies there talk about mini-swe-agent's prompt (its THOUGHT /
example wording, python fences) instead of the task, a ```bash block in 4 of 48. At 135M the gain
does not carry into another harness's prompt.
`--no-warm-start --trainings reference` trains only that policy (the command for the reference ->
mini-swe-agent direction at quickstart scale; not run to its end here).

With `--warm-start` (the default) each run first learns the harness's format from demonstrations: the oracle
teacher (`proxy.teacher.kind: oracle`) answers `--demo-tasks-per-family` training tasks of each
trained family through the real harnesses with the tasks' reference solutions, recorded in
`<out>/demonstrations` (one capture: `bench/training_runs.capture_demonstrations`). Each run is
then one chain (`trainer.sft`): `--sft-steps` SFT steps of 8 passed demonstrations (at
`--sft-lr`, `trainer.sft.lr`) through its own harnesses (`trainer.sft.harnesses`; the mix takes
both), then `--steps` GRPO steps through its harness mix. The warm start's version and the last
are evaluated: policies `<run>: warm start` and `<run>: warm start + RL` (the mix's warm start,
both harnesses' SFT, is not a cell of its own: only its last version is evaluated). Besides `cells` (policy ×
evaluation harness: Pass@1, its interval, the paired difference from the base over tasks and over
families, per held-out part), the JSON has `mswea_after_warm_start` / `mswea_after_rl` (Pass@1 on
trained-family instances through mini-swe-agent of its chain) and `best_offdiagonal_ci95_delta`:
among policies trained through one harness, evaluated through the other, the highest lower end of
a difference's interval (`best_offdiagonal` names the cell). The default size is the whole
matrix for 2 cores in under 2 hours: three chains (reference, mini-swe-agent, mix) of 18 SFT and 8
GRPO steps of 4 x 8, 48 + 48 held-out tasks (6 of each family), one mini-swe-agent call a rollout.
`--small` is the mini-swe-agent chain only (96 demonstrations, 18 SFT steps, 8 GRPO steps of 4 x 8), 24 + 24
held-out tasks, one call a rollout. mini-swe-agent runs through its direct client
(`--swe-client direct`: its own model classes pointed at the proxy, the same prompts without
litellm's import, `bench/mswea_client.py`), all of a step's rollouts at once.

The warm-start settings (SFT at 1e-4 for 18 steps, 1.5 epochs of 96 demonstrations; RL at the
quickstart's 2e-5) were chosen on the validation split (`--eval-split validation`, 24 + 24 tasks,
one run, seed 0, a25c40d): through mini-swe-agent, on trained-family instances, the base policy 0/24,
after 12 SFT steps at 5e-5 (one epoch) 6/48 over both parts; after 18 at 1e-4 0.292 (+0.292 [+0.125, +0.458]),
after 8 more GRPO steps 0.333 (+0.333 [+0.167, +0.542]); unseen families 0 -> 0.125 -> 0.125
([+0.00, +0.29]). Through the reference harness, never trained on: 0.042 -> 0.208 (+0.167
[+0.042, +0.333]) -> 0.292 (+0.250 [+0.083, +0.417]): the format learnt through one harness, and
the skill, carry to the other.

`--small` on the test split (2 AMD EPYC cores, seed 0, 3348c81; 28.8 minutes: 42 s to capture the
96 demonstrations, 16 min to train, the rest evaluating), Pass@1 with the paired difference from
the base (over tasks; over families where it differs):

| policy | via mini-swe-agent, trained families | unseen families | via reference, trained families | unseen families |
| --- | --- | --- | --- | --- |
| base | 0/24 | 0/24 | 0.083 | 0.167 |
| warm start (18 SFT steps) | 0.292, +0.292 [+0.125, +0.458] | 0.292, +0.292 [+0.125, +0.500]; families [+0.00, +0.58] | 0.292, +0.208 [+0.00, +0.42] | 0.333, +0.167 [+0.042, +0.333]; families [+0.00, +0.38] |
| + 8 GRPO steps | 0.417, +0.417 [+0.208, +0.625] | 0.292, +0.292 [+0.125, +0.500]; families [+0.00, +0.58] | 0.292, +0.208 [+0.00, +0.42] | 0.333, +0.167 [+0.042, +0.333]; families [+0.00, +0.38] |

`mswea_after_warm_start` 0.292, `mswea_after_rl` 0.417, `best_offdiagonal_ci95_delta` [+0.042, +0.333]
(the warm start through the reference harness, unseen families). The trained-family instances
are one per family, so their two intervals are one. Every gain through mini-swe-agent is beyond
its interval over tasks; none on unseen families is beyond its interval over families (8 families
of 3 tasks). The 8 GRPO steps lifted trained families by 0.125 over the warm start, a difference
this size does not resolve.

The default size on the test split (2 AMD EPYC cores with AVX-512, seed 0, 7b7158e; 84.7 minutes:
60 s to capture 192 demonstrations, training 5.0 / 28.8 / 19.3 minutes for the reference,
mini-swe-agent and mix chains (an SFT step on mini-swe-agent's ~1,100-token demonstrations takes
~80 s), the rest evaluating), Pass@1 with the paired difference from the base, over tasks, and over
families where it differs (48 + 48 tasks, 6 of each family):

| policy | via reference, trained families | unseen families | via mini-swe-agent, trained families | unseen families |
| --- | --- | --- | --- | --- |
| base | 0.021 | 0.042 | 0/48 | 0/48 |
| reference: warm start | 0.521, +0.500 [+0.35, +0.65] | 0.167, +0.125 [+0.04, +0.23]; families [0, +0.33] | 0/48 | 0/48 |
| reference: warm start + RL | 0.500, +0.479 [+0.33, +0.62] | 0.167, +0.125 [+0.04, +0.23]; families [0, +0.33] | 0/48 | 0/48 |
| mini-swe-agent: warm start | 0.271, +0.250 [+0.12, +0.38] | 0.188, +0.146 [+0.06, +0.25]; families [0, +0.33] | 0.229, +0.229 [+0.12, +0.35]; families [+0.08, +0.40] | 0.167, +0.167 [+0.06, +0.27]; families [0, +0.44] |
| mini-swe-agent: warm start + RL | 0.333, +0.312 [+0.19, +0.46]; families [+0.15, +0.48] | 0.188, +0.146 [+0.04, +0.27]; families [0, +0.35] | 0.458, +0.458 [+0.31, +0.60]; families [+0.27, +0.65] | 0.167, +0.167 [+0.06, +0.27]; families [0, +0.42] |
| mix: warm start + RL | 0.292, +0.271 [+0.15, +0.40] | 0.292, +0.250 [+0.12, +0.40]; families [0, +0.54] | 0.354, +0.354 [+0.23, +0.50] | 0.271, +0.271 [+0.15, +0.40]; families [0, +0.54] |

`mswea_after_warm_start` 0.229, `mswea_after_rl` 0.458, `best_offdiagonal_ci95_delta` [+0.19,
+0.46] (the mini-swe-agent chain through the reference harness, trained families; over families
[+0.15, +0.48]). Through mini-swe-agent the 8 GRPO steps doubled the warm start's Pass@1 on trained
families (0.229 -> 0.458; the two intervals, [0.13, 0.37] and [0.33, 0.60], overlap). The gain
carries from mini-swe-agent to the reference harness, not back: the policy trained through the
reference harness never wrote mini-swe-agent's fence (0/96), and its 8 GRPO steps added nothing
there (trained families at reward 0.97 after SFT: groups without variance). Every unseen-family
gain is beyond its interval over tasks and none over families: they come from sibling families
that share a program with a trained one (make_dir, move_into_dir, two_empty_files; through
mini-swe-agent the mini-swe-agent chain passed 6, 1 and 1 of their 6 tasks, the mix 4, 4 and 5); the
other five, the new-skill families among them, passed at most 1 of 6 through any policy.
The LAST line is one JSON object of the figures.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from training_runs import (
    TOY,
    capture_demonstrations,
    evaluate,
    held_out_parts,
    merged,
    train,
    write_run_config,
)

from clawgym.config import parse_sets
from clawgym.evaluation.runner import EvalResult
from clawgym.report.plots import COLOURS, DPI
from clawgym.report.summary import before_after
from clawgym_app.commands.quickstart import QuickstartOptions

HARNESSES = ("reference", "mini-swe-agent")  # the default pair (--harnesses)
PARTS = {"": "trained families", "_unseen_families": "unseen families"}


def trainings(harnesses: tuple[str, ...]) -> dict[str, list[dict]]:
    """Policy name → the harness mix it trains through: each harness alone, and their mix."""
    one = {h: [{"name": h, "weight": 1.0}] for h in harnesses}
    return one | {"mix": [{"name": h, "weight": 1.0} for h in harnesses]}


def run_changes(opts: QuickstartOptions, name: str, mix: list[dict], harnesses: tuple[str, ...], swe: dict,
                concurrency: dict[str, int]) -> dict:  # fmt: skip
    """What a transfer run changes in the quickstart's config: its harness mix, both harnesses'
    settings (so every `clawgym eval` of every policy uses the same: `swe` is mini-swe-agent's),
    rollouts at once per harness (`concurrency`), no self-evaluation."""
    settings = {"reference": {"max_turns": opts.max_turns, "max_tokens": opts.max_new_tokens}, "mini-swe-agent": swe}
    return {
        # the proxy's cap must let mini-swe-agent's longer replies through (the reference harness asks for its own)
        "proxy": {"max_new_tokens": max(opts.max_new_tokens, swe["max_tokens"])},
        "trainer": {"run_name": f"transfer-{name}", "harnesses": mix},
        "orchestrator": {
            "harness_settings": {h: settings[h] for h in harnesses if h in settings},
            "harness_concurrency": {h: n for h, n in concurrency.items() if h in harnesses},
        },
        "evaluation": {"at_start": False, "at_end": False},
    }


def warm_changes(demos: Path, harnesses: list[str], sft_steps: int, rl_steps: int, sft_lr: float) -> dict:
    """What a warm-started run adds to `run_changes`: `sft_steps` SFT steps on the oracle's passed
    demonstrations through `harnesses` (`demos` holds them), then `rl_steps` RL steps; the warm
    start's version is kept whole (not made lean) for its own evaluation."""
    return {
        "trainer": {
            "steps": sft_steps + rl_steps,
            "keep_every": sft_steps,
            "lean_kept_checkpoints": False,
            "sft": {"source": str(demos), "teacher_only": True, "min_reward": 1.0, "steps": sft_steps,
                    "groups_per_step": 8, "lr": sft_lr, "harnesses": harnesses},
        }
    }  # fmt: skip


def demonstration_tasks(run_dir: Path, per_family: int) -> list[str]:
    """`per_family` training tasks of each trained family of the run (its config's trainer.tasks),
    taken round-robin over families (`evaluation.select.spread`)."""
    from clawgym.config import load_config
    from clawgym.evaluation.select import spread
    from clawgym.tasks.loader import load_tasks
    from clawgym.tasks.suites import resolve_suite

    t = load_config(run_dir / "config.yaml").trainer
    train = set(t.tasks)
    tasks = [task for task in load_tasks(resolve_suite(t.suite)) if task.id in train]
    families = {str(task.metadata.get("family", "")) for task in tasks}
    return [task.id for task in spread(tasks, per_family * len(families))]


def best_offdiagonal(cells: dict[str, dict[str, dict]], trained_through: dict[str, str], harnesses: tuple[str, ...]) -> dict:
    """The cell of a policy trained through one harness and evaluated through the other whose
    difference from the base has the highest lower 95% end (over tasks), over both held-out parts."""
    best: dict = {}
    for policy, harness in trained_through.items():
        for h in harnesses:
            if h == harness or policy not in cells:
                continue
            for suffix, what in PARTS.items():
                cell = cells[policy][h]
                if f"ci95_delta{suffix}" in cell and (not best or cell[f"ci95_delta{suffix}"][0] > best["ci95_delta"][0]):
                    best = {"policy": policy, "eval_harness": h, "part": what, "delta": cell[f"delta{suffix}"],
                            "ci95_delta": cell[f"ci95_delta{suffix}"]}  # fmt: skip
    return best


def matrix(results: dict[str, EvalResult], parts, harnesses: tuple[str, ...]) -> dict[str, dict[str, dict]]:
    """policy → evaluation harness → Pass@1 (+ interval, + paired difference from the base) per part."""
    base = results["base"]
    out: dict[str, dict[str, dict]] = {}
    for policy, result in results.items():
        out[policy] = {}
        for h in harnesses:
            cell: dict = {}
            for suffix in PARTS:
                ids = parts.ids("unseen" if suffix else "trained")
                figures = before_after([h], base, result, ids, suffix, parts.family_of) if ids else {}
                # the base's own figures are its row; a trained policy's cell: Pass@1, CI, paired difference
                # (over tasks, and over families)
                keep = ("pass1_after", "ci95_after") if policy == "base" else (
                    "pass1_after", "ci95_after", "delta", "ci95_delta", "ci95_delta_by_family", "significant")  # fmt: skip
                cell |= {k.replace("_after", ""): v for k, v in figures.items() if (k.replace(suffix, "", 1) if suffix else k) in keep}
            out[policy][h] = cell
    return out


def plot(cells: dict[str, dict[str, dict]], path: Path, harnesses: tuple[str, ...]) -> Path:
    """Bars: Pass@1 with 95% intervals, grouped by evaluation harness, one bar per policy; a panel per part."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PARTS), figsize=(5.6 * len(PARTS), 4.0), squeeze=False)
    fig.suptitle("Held-out Pass@1 by training harness (bars) and evaluation harness (groups)", fontsize=11)
    width = 0.8 / len(cells)
    for ax, (suffix, what) in zip(axes[0], PARTS.items(), strict=True):
        for i, (policy, row) in enumerate(cells.items()):
            xs, ys, lows, highs = [], [], [], []
            for j, h in enumerate(harnesses):
                value = row[h].get(f"pass1{suffix}")
                if value is None:
                    continue
                low, high = row[h][f"ci95{suffix}"]
                xs.append(j + (i - (len(cells) - 1) / 2) * width)
                ys.append(value)
                lows.append(max(0.0, value - low))
                highs.append(max(0.0, high - value))
            label = "base policy" if policy == "base" else f"trained via {policy}"
            ax.bar(xs, ys, width, yerr=[lows, highs], capsize=3, color=COLOURS[i % len(COLOURS)], label=label)
        ax.set_xticks(range(len(harnesses)), [f"eval via {h}" for h in harnesses])
        ax.set_title(f"held-out {what}", fontsize=10)
        ax.set_ylabel("Pass@1 (95% CI)")
        ax.set_ylim(0, 1.02)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    per_row = 4  # policies a legend row: the full matrix's 7 in one row run off both sides
    rows = -(-len(labels) // per_row)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), per_row), fontsize=8)
    fig.tight_layout(rect=(0, 0.05 + 0.04 * rows, 1, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--toy", action="store_true", help="tiny-qwen3, 2 steps per run: checks the plumbing")
    p.add_argument("--steps", type=int, default=8, help="RL steps of each run")
    p.add_argument("--eval-tasks", type=int, default=48, help="held-out instances of trained families")
    p.add_argument("--eval-unseen-tasks", type=int, default=48, help="held-out tasks of unseen families")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens per model call (a tool call needs ~30)")
    p.add_argument("--groups-per-step", type=int, default=QuickstartOptions.groups_per_step)
    p.add_argument("--group-size", type=int, default=QuickstartOptions.group_size)
    p.add_argument("--swe-turns", type=int, default=1, help="mini-swe-agent: model calls per rollout, at most")
    p.add_argument("--swe-mode", choices=("text", "tools"), default="text",
                   help="mini-swe-agent: its text-based config (a fenced command) or its bash function tool")  # fmt: skip
    p.add_argument("--swe-fences", nargs="+", default=None, metavar="LANG",
                   help="mini-swe-agent text mode: fence languages its parser takes (default: its own)")  # fmt: skip
    p.add_argument("--swe-client", choices=("litellm", "direct"), default="direct",
                   help="mini-swe-agent: what sends its requests (direct: the same prompts without litellm's import)")  # fmt: skip
    p.add_argument("--swe-max-tokens", type=int, default=0,
                   help="mini-swe-agent: tokens per reply (default --max-new-tokens; its prompt asks for a THOUGHT first)")  # fmt: skip
    p.add_argument("--harnesses", nargs=2, default=list(HARNESSES), metavar="HARNESS",
                   help="the two harnesses trained through and evaluated through (default: reference mini-swe-agent)")  # fmt: skip
    p.add_argument("--concurrency", nargs="+", default=[], metavar="HARNESS=N",
                   help="rollouts at once through a harness (default: a step's, 8 for mini-swe-agent through litellm)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a config field over the quickstart's in every run (--set inference.prefix_cache_tokens=8192)")  # fmt: skip
    p.add_argument("--trainings", nargs="+", default=None, metavar="POLICY",
                   help="which policies to train: a harness of --harnesses or mix (default: all three)")  # fmt: skip
    p.add_argument("--warm-start", action=argparse.BooleanOptionalAction, default=True,
                   help="each training starts with SFT on the oracle's demonstrations through its harness(es)")  # fmt: skip
    p.add_argument("--small", action="store_true",
                   help="--warm-start at a size for 2 cores in ~45 min: the second harness's chain only, 24 + 24 tasks")  # fmt: skip
    p.add_argument("--demo-tasks-per-family", type=int, default=4, help="--warm-start: demonstrated training tasks per family")
    p.add_argument("--sft-steps", type=int, default=18, help="--warm-start: SFT steps (8 demonstrations each)")
    p.add_argument("--sft-lr", type=float, default=1e-4, help="--warm-start: the SFT steps' learning rate")
    p.add_argument("--eval-split", choices=("test", "validation"), default="test",
                   help="held-out split: test (reported figures) or validation (for choosing settings)")  # fmt: skip
    p.add_argument("--model", default="", help="policy (default smollm2-135m; tiny-qwen3 with --toy)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="", help="keep the run folders here (default: a temp folder)")
    args = p.parse_args()
    harnesses = tuple(args.harnesses)
    chains = trainings(harnesses)
    args.trainings = args.trainings or list(chains)
    if unknown := set(args.trainings) - set(chains):
        p.error(f"--trainings: {sorted(unknown)} are not among {list(chains)}")
    if args.small:  # the measured small size (see the module doc)
        args.warm_start, args.trainings = True, [harnesses[1]]
        args.steps, args.groups_per_step, args.group_size = 8, 4, 8
        args.eval_tasks, args.eval_unseen_tasks, args.swe_turns = 24, 24, 1
    if args.toy:
        opts, swe_turns = replace(TOY, seed=args.seed), 2
        if args.warm_start:  # the oracle's fenced answers need more than the toy's 16 tokens a reply
            opts = replace(opts, max_new_tokens=64)
    else:
        opts = QuickstartOptions(steps=args.steps, eval_tasks=args.eval_tasks, eval_unseen_tasks=args.eval_unseen_tasks,
                                 max_new_tokens=args.max_new_tokens, seed=args.seed, eval_split=args.eval_split,
                                 groups_per_step=args.groups_per_step, group_size=args.group_size,
                                 finetune="full")  # every weight, as its matrix was measured  # fmt: skip
        swe_turns = args.swe_turns
    if args.model:
        opts = replace(opts, model=args.model)
    out = Path(args.out or tempfile.mkdtemp(prefix="clawgym-transfer-")).resolve()
    store = out / "evals.db"
    started = time.monotonic()
    swe_max_tokens = args.swe_max_tokens or opts.max_new_tokens
    swe = {"max_turns": swe_turns, "mode": args.swe_mode, "max_tokens": swe_max_tokens, "client": args.swe_client}
    if args.swe_fences:
        swe["fences"] = args.swe_fences
    # through litellm each start imports it (~2.6 s of CPU; 16 rollouts took 220 s at 4 or 16 at a time): 8 at
    # once. Other starts are light: a step's rollouts all at once, so the engine decodes them as one batch
    concurrency = {h: opts.concurrency for h in harnesses} | (
        {"mini-swe-agent": 8} if args.swe_client == "litellm" else {}
    )
    concurrency |= {h: int(n) for h, n in (item.split("=", 1) for item in args.concurrency)}
    sft_steps = 2 if args.toy else args.sft_steps
    demos = out / "demonstrations"
    for name in args.trainings:
        changes = merged(run_changes(opts, name, chains[name], harnesses, swe, concurrency), parse_sets(args.set))
        if args.warm_start:
            sft_through = [h["name"] for h in chains[name]]  # a chain's demonstrations: through its own harnesses
            changes = merged(changes, warm_changes(demos, sft_through, sft_steps, opts.steps, args.sft_lr))
        write_run_config(opts, out / name, changes)
    first = out / args.trainings[0]
    parts = held_out_parts(first)  # the same train and held-out tasks in every run
    figures: dict = {}
    if args.warm_start:
        t0 = time.monotonic()
        ids = demonstration_tasks(first, 1 if args.toy else args.demo_tasks_per_family)
        through = sorted({h["name"] for n in args.trainings for h in chains[n]})
        done = demos / "capture.json"  # a rerun into the same --out keeps its demonstrations
        if not done.exists():
            done.write_text(json.dumps(capture_demonstrations(first, through, ids, demos)))
        captured = json.loads(done.read_text())
        figures["demonstrations"] = {h: {"tasks": m["tasks"], "pass1": m["pass@1"]} for h, m in captured["harnesses"].items()}
        figures["demonstrations"]["capture_s"] = round(time.monotonic() - t0, 1)
    results = {"base": evaluate(first, 0, list(harnesses), store)}
    trained: dict[str, dict] = {}
    for name in args.trainings:
        t0 = time.monotonic()
        summary = train(out / name)
        trained[name] = {"steps": summary["steps"], "train_s": round(time.monotonic() - t0, 1)}
        if args.warm_start:
            # a chain through one harness; the mix's warm start (both harnesses' SFT) is not a cell of its own
            if name in harnesses:
                results[f"{name}: warm start"] = evaluate(out / name, sft_steps, list(harnesses), store)
            results[f"{name}: warm start + RL"] = evaluate(out / name, summary["steps"], list(harnesses), store)
        else:
            results[name] = evaluate(out / name, summary["steps"], list(harnesses), store)
    cells = matrix(results, parts, harnesses)
    png = plot(cells, out / "transfer.png", harnesses)
    through_one = {p: n for n in harnesses for p in results if p.split(":")[0] == n}
    figures["best_offdiagonal"] = best_offdiagonal(cells, through_one, harnesses)
    figures["best_offdiagonal_ci95_delta"] = figures["best_offdiagonal"].get("ci95_delta")
    if args.warm_start and "mini-swe-agent" in args.trainings:
        figures["mswea_after_warm_start"] = cells["mini-swe-agent: warm start"]["mini-swe-agent"].get("pass1")
        figures["mswea_after_rl"] = cells["mini-swe-agent: warm start + RL"]["mini-swe-agent"].get("pass1")
    if args.warm_start:  # each chain through one harness, evaluated through that harness, trained families
        figures["after"] = {
            n: {stage: cells[f"{n}: {stage}"][n].get("pass1") for stage in ("warm start", "warm start + RL")}
            for n in args.trainings if n in harnesses
        }

    for suffix, what in PARTS.items():
        print(f"\nheld-out Pass@1, {what} (difference from the base policy, paired 95% CI)")
        print(f"{'policy':34}" + "".join(f"  {'eval via ' + h:>44}" for h in harnesses))
        for policy, row in cells.items():
            line = f"{policy:34}"
            for h in harnesses:
                c = row[h]
                if f"pass1{suffix}" not in c:
                    line += f"  {'-':>44}"
                    continue
                low, high = c[f"ci95{suffix}"]
                text = f"{c[f'pass1{suffix}']:.3f} [{low:.2f}, {high:.2f}]"
                if policy != "base" and f"delta{suffix}" in c:
                    dl, dh = c[f"ci95_delta{suffix}"]
                    text += f" {c[f'delta{suffix}']:+.3f} [{dl:+.2f}, {dh:+.2f}]"
                line += f"  {text:>44}"
            print(line)
    infra = {p: {h: r.harnesses[h].infra_failures for h in harnesses} for p, r in results.items()}
    print(f"\ninfrastructure failures per policy and harness: {infra}; plot: {png}")
    print(json.dumps({
        "model": opts.model, "harnesses": list(harnesses), "steps": opts.steps, "swe_mode": args.swe_mode, "swe_fences": args.swe_fences, "swe_max_tokens": swe_max_tokens, "swe_turns": swe_turns, "swe_client": args.swe_client, "batch": f"{opts.groups_per_step}x{opts.group_size}",
        "eval_tasks": len(parts.ids("trained")), "eval_tasks_unseen_families": len(parts.ids("unseen")),
        "warm_start": args.warm_start, "sft_steps": sft_steps if args.warm_start else 0, "eval_split": opts.eval_split,
        **figures, "cells": cells,
        "runs": trained, "infra_failures": infra, "wall_s": round(time.monotonic() - started, 1),
        "plot": str(png), "out": str(out),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
