"""`clawgym quickstart`: the main job on embedded defaults, CPU only, in one process.

SmolLM2-135M-Instruct through the reference harness on the bundled mini suite: evaluate held-out
Pass@1, train with GRPO over prefix trees (rollouts through the real proxy, orchestrator, local
sandboxes and verifiers), evaluate again, print before/after Pass@1 with 95% intervals, and write
a run folder (`runs/<timestamp>/`: report.md, plots, the SQLite store, config.yaml, run.log).

`--minutes` is a budget (by default 10 minutes): training stops between steps when another step plus
the final evaluation would not fit; on 2 cores the defaults use it, after 32-37 of the 60 steps in
bfloat16 (AVX512-BF16; LoRA adapters trained) and 25-32 in float32 capped at AVX2 (the top half of
the layers trained) in the runs measured (bench/quickstart.py, docs/quickstart-runs.md), in 2.4-3.6
GB (in float32 one copy of the weights, shared by the engine and the trainer, and 128 MB of packed
layers; in bfloat16 the engine's own bfloat16 copy; the harness prompt's KV kept once in the running
batch; docs/performance.md).
`QuickstartOptions` holds
every knob and is the one source of the command line's defaults; it imports nothing heavy, so
`clawgym --help` needs no torch.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.policies.specs import DEFAULT_POLICY
from clawgym_app.config_options import set_option

COMMAND_TIMEOUT_S = 5.0  # reference harness: seconds one shell command of the policy may run
# learning rates: LoRA's best is ~10x full training's (as "LoRA Without Regret" found at larger scale)
FULL_LR, LORA_LR = 2e-5, 2e-4

if TYPE_CHECKING:
    from clawgym.config import ClawgymConfig
    from clawgym.run import RunOutcome


@dataclass(frozen=True)
class QuickstartOptions:
    """Every knob of the quickstart (the CLI's options); defaults fill the 10-minute budget on 2 cores."""

    model: str = DEFAULT_POLICY
    suite: str = "mini"
    max_level: int = 2
    # 60, measured beside 24 and 48 (clean clones, seeds 0 and 1, 2 AVX-512 cores): unseen families moved
    # +0.062 / +0.026 at 24 steps (6 minutes), +0.073 / +0.099 at 48 (10 minutes), +0.188 / +0.130 at 60
    # (10.4 / 11.2 minutes; intervals apart). The --minutes budget stops slower machines early.
    steps: int = 60
    eval_tasks: int = 96
    # all 192 the mini suite holds for its 8 held-out families at levels 1-2 (24 each): their gain is
    # the smaller one (+0.115 in two runs at 96 tasks), and 96 left the before/after intervals
    # overlapping by a few hundredths; 192 cost 18-57 s more per evaluation (seed 0: 75 -> 93 s
    # before training, 57 -> 114 s after)
    eval_unseen_tasks: int = 192
    # held-out tasks from the suite's `test` split (the figures a run reports) or its `validation`
    # split (drawn alike, for choosing settings without touching test)
    eval_split: str = "test"
    eval_samples: int = 1
    group_size: int = 8
    groups_per_step: int = 4
    # what the update trains: auto = LoRA adapters where the CPU computes bfloat16 (measured beside full
    # training on the validation split: gains as large, ~0.25 GB less at the peak; as many steps: alone
    # its update is no faster, bench/finetune_update.py), the weights themselves in float32 (where LoRA's
    # engine needs its own copy of the weights, the trainer's shared otherwise; `trained_layers`: which)
    finetune: str = "auto"
    lora_rank: int = 16  # rank of the adapters on every linear layer of the decoder
    # decoder layers the update trains, from the top: -1 = auto, the top half where the weights themselves
    # train (float32; measured beside every layer, capped at AVX2, validation seed 0: 32 steps in 10 minutes
    # against 23, 2.40 GB against 2.97, both gains beyond their intervals at both; the top 8: 25 steps,
    # the trained families' gain within its interval; the top 15 at seeds 1 and 2: beyond at both), every
    # layer with LoRA adapters; 0 = every layer
    trained_layers: int = -1
    # 0 = by what is trained: 2e-4 for LoRA adapters, 10x full training's 2e-5 (full:
    # 5e-5 lowered both held-out sets in 6 steps, seed 0, 2e-5 raised both)
    lr: float = 0.0
    temperature: float = 0.7
    max_new_tokens: int = 40
    max_turns: int = 1
    # signal, compared with uniform on the validation split at these defaults (seeds 0 and 1, one
    # after the other, 2 AVX-512 cores; docs/quickstart-runs.md): trained families alike (+0.240 /
    # +0.260 against +0.260 / +0.260), unseen families +0.083 / +0.151 against -0.005 / +0.104
    sampling: str = "signal"
    # a step's 32 rollouts decode as one batch: on 2 cores the engine makes 2.6x the tokens/s of 8 at once
    concurrency: int = 32
    # async: the next step's rollouts run during the update (one step of policy lag, which the
    # trainer's importance weights correct); measured beside sync (6 steps, seed 3, 2 cores): 126 s
    # of training against 161 s; sync: rollouts, then the update
    mode: str = "async"
    threads: int = 0
    # the dtype the engine and the trainer's matrix products compute in (the trained weights and the
    # optimizer stay float32): auto = bfloat16 where the CPU computes it natively (AVX512-BF16, AMX),
    # float32 elsewhere (emulated bfloat16 is slower), the weights then shared by engine and trainer
    compute_dtype: str = "auto"
    # 0 = by what the run computes (`budget_minutes`). The rule, fixed before the runs: 10 minutes if both
    # held-out gains are beyond their intervals over tasks at validation seeds 0-2. float32, every layer
    # (an Intel Xeon, AVX-512 without bfloat16): 22-27 steps fit, the trained families' gain within its
    # interval at seed 2, so 15; float32, the top half of the layers (an AMD EPYC capped at AVX2): 25-32
    # steps, beyond at all three; bfloat16 (an AMD EPYC with AVX512-BF16): 30-33 steps fit, beyond at all
    # three, and with LoRA (the default there) 34-37, beyond at all three (32 in the one test run, beyond too)
    minutes: float = 0.0
    seed: int = 0
    run_dir: str = ""

    def config(self, run_dir: Path) -> ClawgymConfig:
        """The whole `ClawgymConfig` of the quickstart run (embedded mode), with absolute paths: its
        config.yaml repeats the run's evaluation from any folder (`clawgym eval -c`)."""
        from clawgym.config import ClawgymConfig
        from clawgym.report.run_folder import CHECKPOINTS_DIR, store_url

        run_dir = run_dir.resolve()
        train_ids, eval_ids = self.task_ids()
        dtype = compute_dtype(self.compute_dtype)
        adapters = trains_adapters(self.finetune, dtype)
        return ClawgymConfig(
            store={"url": store_url(run_dir), "bus_url": "memory://", "grpc_url": ""},
            # the prefix cache holds the harness's system prompt and a few tasks' prompts (a GRPO
            # group's G samples share one); 2048 tokens of SmolLM2 KV are 90 MB
            inference={
                "model": self.model,
                "engine": "torch",
                "dtype": dtype,
                "grpc_url": "",
                "prefix_cache_tokens": 2048,
                # float32 full training: the engine computes with the trainer's parameters, one copy;
                # bfloat16 or LoRA: its own copy of them (adapters merged), refreshed at each commit
                "weight_sync": "shared" if dtype == "float32" and not adapters else "copy",
                # packed copies of the layers that gain most per byte (the LM head first), not of every
                # layer that gains: ~0.4 GB less on an AVX-512 CPU (docs/performance.md, memory)
                "pack_weights_mb": 128,
            },
            proxy={"max_new_tokens": self.max_new_tokens, "temperature": self.temperature},
            sandbox={"backend": "local"},
            orchestrator={
                "grpc_url": "",
                "max_concurrent_rollouts": self.concurrency,
                "max_attempts": 2,
                "retry_backoff_s": 0.5,
                "harness_settings": {
                    "reference": {
                        "max_turns": self.max_turns,
                        "max_tokens": self.max_new_tokens,
                        # the suite's chores run in milliseconds; a command that blocks (`tail -f`,
                        # `vi`, an `npm install`) held its whole GRPO step for the default 30 s
                        "command_timeout_s": COMMAND_TIMEOUT_S,
                    }
                },
            },
            trainer={
                "model": self.model,
                "autocast": "off" if dtype == "float32" else dtype,
                "run_name": "quickstart",
                "steps": self.steps,
                "group_size": self.group_size,
                "groups_per_step": self.groups_per_step,
                # β1 = 0: no momentum. Once the policy sharpens, whole batches can carry no reward
                # variance (every group all-pass or all-fail) and a zero gradient; with momentum, AdamW
                # would still step in the previous direction (measured: the policy drifted and the
                # batch reward fell from 0.5 to 0.0 over such steps). Cosine decay calms the last steps.
                # (Such a batch is no longer forwarded: update.has_gradient skips its groups and the
                # optimizer steps on a zero gradient. β1 > 0 is a measurement still to make, #17.)
                "algorithm": {
                    "name": "grpo",
                    "lr": self.lr or (LORA_LR if adapters else FULL_LR),
                    "betas": (0.0, 0.999),
                    "lr_schedule": "cosine",
                    "min_lr_ratio": 0.1,
                },
                "lora": lora_adapters(self.lora_rank) if adapters else {},
                "trained_layers": trained_layers(self.trained_layers, adapters, self.model),
                "harnesses": [{"name": "reference", "weight": 1.0}],
                "suite": self.suite,
                "tasks": train_ids,
                "sampling": {"mode": self.sampling},
                "seed": self.seed,
                "mode": self.mode,
                "max_policy_lag": 1,
                "checkpoint_uri": str(run_dir / CHECKPOINTS_DIR),
                # the last version and each third of the run (60 steps: v20, v40, v60) for `clawgym
                # eval --checkpoint V`: at most 3 folders whatever --steps is, the last ~540 MB (SmolLM2-135M),
                # the older ones lean (bfloat16, ~270 MB: trainer.lean_kept_checkpoints)
                "keep_checkpoints": 1,
                "keep_every": max(1, math.ceil(self.steps / 3)),
                "save_optimizer_state": False,  # a quickstart never resumes: ~2.5 s a step saved
                # a laptop's memory (docs/performance.md): the update's peak without the layers'
                # activations and with freed blocks handed back to the OS, for slower steps
                "activation_checkpointing": True,
                "heap_mmap_threshold_mb": 1.0,
                "rollout_timeout_s": 900.0,
                "sweep_interval_s": 5.0,
            },
            evaluation={"task_ids": eval_ids, "samples": self.eval_samples, "ks": [1], "split": self.eval_split},
        )

    def task_ids(self) -> tuple[list[str], list[str]]:
        """(train, held-out) task ids: the suite's train and `eval_split` splits up to `max_level`;
        the held-out ones are `eval_tasks` new instances of trained families and `eval_unseen_tasks`
        tasks of families never trained on, each spread over its families."""
        from clawgym.evaluation.select import train_and_held_out

        return train_and_held_out(
            self.suite, self.max_level, self.eval_tasks, self.eval_unseen_tasks, split=self.eval_split
        )


Q = QuickstartOptions()  # the defaults --help shows


def command(
    model: str = typer.Option(Q.model, help="policy: smollm2-135m, tiny-qwen3 or a local HF folder"),
    steps: int = typer.Option(Q.steps, help="GRPO steps (optimizer steps = policy versions)"),
    eval_tasks: int = typer.Option(
        Q.eval_tasks, help="held-out instances of the trained families, evaluated before and after (0 = all)"
    ),
    eval_unseen_tasks: int = typer.Option(
        Q.eval_unseen_tasks, help="held-out tasks of families never trained on, evaluated too (0 = all)"
    ),
    eval_split: str = typer.Option(
        Q.eval_split,
        help="held-out split: test (the figures to report) or validation (drawn alike: for choosing settings)",
    ),
    eval_samples: int = typer.Option(Q.eval_samples, help="rollouts per held-out task (n of Pass@1)"),
    group_size: int = typer.Option(Q.group_size, "--group-size", "-G", help="G: samples per task group"),
    groups_per_step: int = typer.Option(Q.groups_per_step, help="task groups per step"),
    finetune: str = typer.Option(
        Q.finetune,
        help="what the update trains: lora (adapters on every linear layer), full (every weight); auto = lora "
        "where computing in bfloat16, full in float32",
    ),
    lora_rank: int = typer.Option(Q.lora_rank, help="rank of the LoRA adapters"),
    trained_layers: int = typer.Option(
        Q.trained_layers,
        help="train only the top N decoder layers (their adapters with LoRA); the embeddings, LM head and "
        "layers below stay frozen and the backward stops above them; 0 = every layer; -1 = auto: the top "
        "half where the weights themselves train, every layer with LoRA",
    ),
    lr: float = typer.Option(
        Q.lr, help="AdamW learning rate; 0 = 2e-4 for LoRA adapters, 2e-5 for every weight"
    ),
    temperature: float = typer.Option(Q.temperature, help="sampling temperature of every model call"),
    max_new_tokens: int = typer.Option(Q.max_new_tokens, help="generated tokens per model call, at most"),
    max_turns: int = typer.Option(Q.max_turns, help="reference harness: model calls per rollout, at most"),
    sampling: str = typer.Option(
        Q.sampling, help="task draw: signal (families by expected reward variance) or uniform"
    ),
    concurrency: int = typer.Option(Q.concurrency, help="rollouts running at once"),
    mode: str = typer.Option(
        Q.mode, help="sync: rollouts then update; async: the next rollouts run during the update (lag 1)"
    ),
    threads: int = typer.Option(
        Q.threads,
        help="torch threads; 0 = auto: half the cores each for the engine and the trainer in async mode "
        "(1 on 2 cores), 1 when other processes keep the cores busy",
    ),
    compute_dtype: str = typer.Option(
        Q.compute_dtype,
        help="dtype of the engine and of the trainer's products (weights stay float32); auto = bfloat16 "
        "where the CPU computes it natively (AVX512-BF16, AMX), else float32",
    ),
    minutes: float = typer.Option(
        Q.minutes,
        help="time budget: training stops early to fit it; 0 = 10 minutes, 15 training every layer in float32",
    ),
    suite: str = typer.Option(Q.suite, help="task suite (train split to train, test split to evaluate)"),
    max_level: int = typer.Option(
        Q.max_level, help="only task families up to this level (the mini suite's 1-3); 0 = every task"
    ),
    seed: int = typer.Option(Q.seed, help="seed of task sampling"),
    run_dir: str = typer.Option(Q.run_dir, help="run folder (default runs/<timestamp>)"),
    as_json: bool = typer.Option(
        False, "--json", help="print one final JSON object (progress goes to stderr)"
    ),
    sets: list[str] = set_option(),
) -> None:
    """Train the bundled small policy through the reference harness on the bundled suite; Pass@1 before/after."""
    opts = QuickstartOptions(
        model=model, suite=suite, max_level=max_level, steps=steps, eval_tasks=eval_tasks,
        eval_unseen_tasks=eval_unseen_tasks, eval_split=eval_split, eval_samples=eval_samples,
        group_size=group_size, groups_per_step=groups_per_step, finetune=finetune, lora_rank=lora_rank,
        trained_layers=trained_layers, lr=lr,
        temperature=temperature,
        max_new_tokens=max_new_tokens, max_turns=max_turns, sampling=sampling, concurrency=concurrency,
        mode=mode, threads=threads, compute_dtype=compute_dtype, minutes=minutes, seed=seed, run_dir=run_dir,
    )  # fmt: skip
    console = Console(stderr=True) if as_json else Console()
    try:
        outcome = run_quickstart(opts, console, sets)
    except ClawgymError as e:
        # one line (grep-able, whatever the terminal's width); the message may quote a file's text
        console.print(f"[red]clawgym quickstart:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from e
    if as_json:
        print(json_line(outcome), file=sys.stdout, flush=True)
    else:
        console.print(summary_table(outcome))


def compute_dtype(choice: str) -> str:
    """`auto`: bfloat16 where this CPU computes bfloat16 products natively (oneDNN's view, which
    ONEDNN_MAX_CPU_ISA caps), float32 elsewhere; any other choice as given."""
    if choice != "auto":
        return choice
    import torch

    try:
        native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        native = False
    return "bfloat16" if native else "float32"


def trains_adapters(choice: str, dtype: str) -> bool:
    """Whether the run trains LoRA adapters (`lora`, or `auto` computing in bfloat16) or every weight."""
    if choice not in ("auto", "lora", "full"):
        raise InvalidArgument(f"--finetune must be auto, lora or full, not {choice!r}")
    return choice == "lora" or (choice == "auto" and dtype == "bfloat16")


def trained_layers(choice: int, adapters: bool, model: str) -> int:
    """`trainer.trained_layers` of the run: `choice`, or with -1 (auto) the top half of the model's
    decoder layers where the weights themselves train, every layer (0) where LoRA adapters do."""
    from clawgym.policies.specs import policy_spec

    if choice < -1:
        raise InvalidArgument(f"--trained-layers must be -1 (auto), 0 (every layer) or more, not {choice}")
    if choice >= 0 or adapters:
        return max(choice, 0)
    return (policy_spec(model).layers + 1) // 2


def lora_adapters(rank: int) -> dict[str, Any]:
    """`trainer.lora` of the quickstart's adapters: on attention and MLP alike, alpha / r = 2 at any rank."""
    from clawgym.trainer.config import ALL_LINEAR

    return {"enabled": True, "r": rank, "alpha": 2 * rank, "target_modules": [ALL_LINEAR]}


def budget_minutes(minutes: float, cfg: ClawgymConfig) -> float:
    """`minutes`, or with 0 the measured budget of what the run computes: 10 minutes when the engine
    and the trainer compute in bfloat16 or the update trains the top layers only, 15 for every layer's
    weights in float32 (QuickstartOptions.minutes says why)."""
    if minutes > 0:
        return minutes
    bfloat16 = cfg.inference.dtype == "bfloat16" and cfg.trainer.autocast == "bfloat16"
    return 10.0 if bfloat16 or cfg.trainer.trained_layers else 15.0


# --- the run ---


def run_quickstart(opts: QuickstartOptions, console: Console, sets: Sequence[str] = ()) -> RunOutcome:
    """The whole quickstart (its config with `sets`, `--set` items, over it); progress on `console`;
    returns the outcome (summary, report path)."""
    from clawgym.config import with_sets
    from clawgym.preflight import preflight
    from clawgym.report.run_folder import LOG_FILE, fresh_run_dir, write_summary
    from clawgym.run import in_folder, write_run_config
    from clawgym_app.commands.train import forget_folder
    from clawgym_app.logs import log_to_file, quiet_libraries, set_threads

    started = time.monotonic()
    run_dir = Path(opts.run_dir) if opts.run_dir else fresh_run_dir()
    cfg = in_folder(with_sets(opts.config(run_dir), sets), run_dir)
    created = not run_dir.exists()
    run_dir.mkdir(parents=True, exist_ok=True)
    log_to_file(run_dir / LOG_FILE)
    quiet_libraries()
    write_run_config(run_dir, cfg)
    try:
        preflight(cfg, models=["trainer.model"], store="open_store", buses=["store.bus_url"])
    except ClawgymError:
        if created:
            forget_folder(run_dir)  # a refused start leaves no folder behind
        raise
    # torch and the rest only once the config passed: a refusal above comes in about a second
    from clawgym_app.runtime import Runtime
    from clawgym_app.training_run import run_with_progress

    threads = set_threads(opts.threads, computing=2 if opts.mode == "async" else 1)  # engine beside trainer
    minutes = budget_minutes(opts.minutes, cfg)
    levels = f", levels <= {opts.max_level}" if opts.max_level else ""
    train_ids, eval_ids = cfg.trainer.tasks, cfg.evaluation.task_ids
    console.print(
        f"[bold]clawgym quickstart[/bold] → {run_dir}\n  {opts.model} through the reference harness on the "
        f"{opts.suite} suite{levels}: {len(train_ids)} train tasks, {len(eval_ids)} held-out tasks; "
        f"{minutes:g} minutes at most, computing in {cfg.inference.dtype}"
    )
    with console.status(f"starting the embedded runtime: store, {opts.model} engine, proxy, orchestrator"):
        t0 = time.monotonic()
        try:
            runtime = Runtime.open(cfg)
        except BaseException:
            if created:
                forget_folder(run_dir)  # a failed start leaves no folder behind
            raise
        open_s = time.monotonic() - t0
    with runtime:
        outcome = run_with_progress(
            runtime,
            run_dir,
            console,
            stages={"start runtime": open_s},
            title=f"clawgym quickstart: {opts.model} through the reference harness on {opts.suite}",
            deadline=started + 60 * minutes,
            settings={
                "quickstart": asdict(opts),
                "budget_minutes": minutes,
                "torch_threads": threads,
                "proxy_url": runtime.proxy_url,
            },
        )
    outcome.summary["minutes"] = round((time.monotonic() - started) / 60, 2)
    outcome.summary["run_dir"] = str(run_dir)
    write_summary(run_dir, outcome.summary)
    return outcome


# --- printing ---


def summary_table(outcome: RunOutcome) -> Table:
    """The final table: Pass@1 before and after with 95% intervals, the difference, time per stage."""
    s = outcome.summary
    table = Table(title="clawgym quickstart", show_header=True)
    table.add_column("figure")
    table.add_column("value", justify="right")

    def interval(key: str) -> str:
        low, high = s.get(key, [float("nan")] * 2)
        return f"[{low:.3f}, {high:.3f}]"

    unseen_label = s.get("label_unseen_families", "unseen families")
    for suffix, what in (("", "trained families"), ("_unseen_families", unseen_label)):
        if f"pass1_before{suffix}" in s:
            table.add_row(
                f"held-out Pass@1 before, {what}",
                f"{s[f'pass1_before{suffix}']:.3f}  {interval(f'ci95_before{suffix}')}",
            )
        if f"pass1_after{suffix}" in s:
            table.add_row(
                f"held-out Pass@1 after, {what}",
                f"{s[f'pass1_after{suffix}']:.3f}  {interval(f'ci95_after{suffix}')}",
            )
        if f"delta{suffix}" in s:
            verdict = "[green]yes[/green]" if s.get(f"significant{suffix}") else "[yellow]no[/yellow]"
            table.add_row(
                "  difference (paired 95% CI)",
                f"{s[f'delta{suffix}']:+.3f}  {interval(f'ci95_delta{suffix}')}",
            )
            if f"ci95_delta{suffix}_by_family" in s:
                table.add_row("  difference, families resampled (95% CI)", interval(f"ci95_delta{suffix}_by_family"))
            table.add_row("  95% intervals apart", verdict)
    unseen = s.get("eval_tasks_unseen_families")
    table.add_row(
        "eval tasks × samples",
        f"{s.get('eval_tasks')}{f' + {unseen}' if unseen else ''} × {s.get('eval_samples')}",
    )
    table.add_row("training steps", str(s.get("steps")))
    for stage, seconds in outcome.stages.items():
        table.add_row(f"  {stage}", f"{seconds:.0f} s")
    table.add_row("minutes", f"{s.get('minutes', 0):.1f}")
    if outcome.report is not None:
        table.add_row("report", str(outcome.report))
    return table


def json_line(outcome: RunOutcome) -> str:
    """The `--json` object: the contract's keys first, then everything else the summary has."""
    s: dict[str, Any] = dict(outcome.summary)
    keys = ("pass1_before", "pass1_after", "ci95_before", "ci95_after")
    head = {k: s.pop(k, None) for k in (*keys, *(f"{k}_unseen_families" for k in keys), "minutes")}
    return json.dumps({**head, **s, "stages_s": {k: round(v, 1) for k, v in outcome.stages.items()},
                       "report": str(outcome.report) if outcome.report else None})  # fmt: skip
