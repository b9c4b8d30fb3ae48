"""Long-tailed rollouts: async steps over rollouts that span versions vs synchronous steps, side by side.

    .venv/bin/python bench/long_tail.py [--sigmas 1.0 1.5] [--staleness 4] [--async-steps 30]
        [--sync-steps 5] [--max-groups 12] [--top async_mask]

Each arm is a fresh embedded stack: SQLite store, the real proxy (loopback), the real orchestrator
running the reference harness in local bubblewrap sandboxes, and the trainer (tiny-qwen3, GRPO
with a small entropy term so every group is packed and trained). The engine is the scripted one:
every rollout makes three calls (two shell commands, then DONE), and before each the engine waits a
third of the rollout's duration, drawn from a lognormal of median `--median-s` and the arm's σ, so
harness time dominates and its tail is a real agent's. Rollouts in flight keep running across the
trainer's publishes, and each call is tagged with the version serving it. (The scripted engine's
logprobs are not the policy's: the trainer's logprob-mismatch warning is expected.)

Arms per σ, 4 groups of 2 a step: `sync` (trainer.mode sync: request a step's groups, wait for all
of them, train); and trainer.mode async with max_policy_lag = `--staleness`, the group at its last
step within the bound waited for idle (`async`), waited for while the step trains the complete
groups meanwhile up to `--max-groups` (`async_fill`: trainer.max_groups_per_step), or never waited
for, trained later with its tokens past the bound masked (`async_mask`: trainer.stale_calls mask).
An async run goes `--staleness` steps past the `--async-steps` measured, so that no measured step is
one of the run's last, which request no group past its end (their time is drain_s, not measured).

Figures per arm, from the first step's commit to the last measured one's: trainer_busy_fraction
(Σ update_s / wall), rollouts_per_min (trained rollouts), dropped_groups (the whole run),
mean/max_staleness (versions between the trainer and a group's oldest trained token; mean over
groups), stale_tokens_masked, groups_per_step_mean, and where steps waited: rollout_wait_s_mean,
rollout_wait_bound_s_mean (only for a group at its last step within the bound), groups_owed_mean
and groups_in_flight_mean at each take. The LAST line is one JSON object: per σ and arm under
"sigma"; the top-level figures are σ = 1.5's `--top` arm.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import tempfile
import time
import zlib
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import torch

from clawgym.assemble import build_orchestrator, build_trainer, open_embedded_proxy, open_sql_store
from clawgym.config import ClawgymConfig
from clawgym.inference.interface import PromptIds, SamplingParams, TokenChunk
from clawgym.inference.scripted import ScriptedEngine
from clawgym.policies import load_tokenizer
from clawgym.store.config import StoreConfig
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.suites import resolve_suite
from clawgym.trainer.loop_thread import LoopThread

CALLS = 3  # per rollout: two commands, then DONE
ARMS = ("sync", "async", "async_fill", "async_mask")


class LongTailEngine:
    """Scripted replies, each call held back a third of its rollout's drawn duration (seeded by the
    rollout id, so both arms' rollouts draw from one distribution); versions follow `load_weights`."""

    def __init__(self, tokenizer, median_s: float, sigma: float, seed: int) -> None:
        self.act = ScriptedEngine.from_texts(tokenizer, ["```bash\necho step >> log.txt\n```"])
        self.done = ScriptedEngine.from_texts(tokenizer, ["DONE"])
        self.median_s, self.sigma, self.seed = median_s, sigma, seed
        self.calls: dict[str, int] = {}  # rollout id → calls made

    def generate(self, prompt: PromptIds, params: SamplingParams, request_id: str) -> AsyncIterator[TokenChunk]:
        rollout_id = request_id.split(":", 1)[0]
        n = self.calls[rollout_id] = self.calls.get(rollout_id, 0) + 1
        rng = np.random.default_rng(zlib.crc32(f"{self.seed}:{rollout_id}".encode()))
        duration = self.median_s * float(np.exp(self.sigma * rng.standard_normal()))
        inner = self.act if n < CALLS else self.done
        return self._paced(inner, duration / CALLS, prompt, params, request_id)

    async def _paced(self, inner, delay_s, prompt, params, request_id) -> AsyncIterator[TokenChunk]:
        await asyncio.sleep(delay_s)
        async for chunk in inner.generate(prompt, params, request_id):
            yield chunk

    async def load_weights(self, version: int, uri: str) -> float:
        await self.act.load_weights(version, uri)
        return await self.done.load_weights(version, uri)

    async def status(self):
        return await self.act.status()

    async def aclose(self) -> None:
        await self.act.aclose()
        await self.done.aclose()


def arm(name: str, sigma: float, args, tokenizer, task_id: str, root: Path) -> dict:
    """One trainer run on a fresh stack; its figures (see the module doc)."""
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-{sigma}-", dir=root))
    mode = "sync" if name == "sync" else "async"
    measured = args.async_steps if mode == "async" else args.sync_steps
    # async: the run goes `--staleness` steps past the measured ones, so that no measured step is one of
    # the run's last (they request no group past its end: fewer in flight, a tail nothing hides)
    steps = measured + (args.staleness if mode == "async" else 0)
    in_flight = (args.staleness + 1) * args.groups * args.group_size
    cfg = ClawgymConfig(
        store={"url": f"sqlite:///{folder / 'store.db'}"},
        proxy={"max_new_tokens": 32},
        sandbox={"owner": "bench-long-tail", "local": {"root_dir": str(folder / "sandboxes"), "isolation": "bwrap"}},
        orchestrator={
            "max_concurrent_rollouts": in_flight,
            "harness_settings": {"reference": {"max_turns": CALLS}},
        },
        trainer={
            "model": "tiny-qwen3",
            "run_name": f"{name}-{sigma}",
            "mode": mode,
            "max_policy_lag": args.staleness,
            "steps": steps,
            "group_size": args.group_size,
            "groups_per_step": args.groups,
            "max_groups_per_step": args.max_groups if name == "async_fill" else 0,
            "stale_calls": "mask" if name == "async_mask" else "wait",
            "tasks": [task_id],
            "algorithm": {"lr": 1e-4, "entropy_coef": 1e-3},
            "checkpoint_uri": str(folder / "checkpoints"),
            "keep_checkpoints": 1,
            "save_optimizer_state": False,
            "sweep_interval_s": 1.0,
            "rollout_timeout_s": 300.0,
        },
    )
    store = open_sql_store(StoreConfig(url=cfg.store.url))
    engine = LongTailEngine(tokenizer, args.median_s, sigma, args.seed)
    runner = LoopThread()
    proxy_url, stop_proxy = open_embedded_proxy(cfg, engine, store, tokenizer)
    orchestrator = build_orchestrator(cfg, store)
    runner.run(orchestrator.start())
    trainer = build_trainer(
        cfg, store=store, rollouts=orchestrator, engines=[engine], runner=runner, tokenizer=tokenizer,
        proxy_url=proxy_url,
    )  # fmt: skip
    try:
        trainer.start()
        started = time.time()
        trainer.run()
        wall_all = time.time() - started
        trainer.cancel_rollouts()
        checkpoints = store.list_checkpoints(trainer.run_id)
    finally:
        trainer.close()
        runner.run(orchestrator.close(), timeout_s=120)
        stop_proxy()
        runner.close()
        store.close()
    window = checkpoints[:measured]
    steady = [c.metrics for c in window[1:]]
    wall = window[-1].created_at - window[0].created_at
    groups = sum(m["groups"] for m in steady)
    return {
        "steps": len(window),
        "wall_s": round(wall, 1),
        "wall_all_s": round(wall_all, 1),
        "drain_s": round(checkpoints[-1].created_at - window[-1].created_at, 1),
        "trainer_busy_fraction": round(sum(m["update_s"] for m in steady) / wall, 3),
        "rollouts_per_min": round(60 * sum(m["rollouts"] for m in steady) / wall, 1),
        "dropped_groups": trainer.dropped_groups,
        "mean_staleness": round(sum(m["policy_lag"] * m["groups"] for m in steady) / groups, 2),
        "max_staleness": max(m["policy_lag_max"] for m in steady),
        "update_s_mean": round(float(np.mean([m["update_s"] for m in steady])), 3),
        "rollout_wait_s_mean": round(float(np.mean([m["rollout_wait_s"] for m in steady])), 3),
        "rollout_wait_bound_s_mean": round(float(np.mean([m["rollout_wait_bound_s"] for m in steady])), 3),
        "groups_owed_mean": round(float(np.mean([m["groups_owed"] for m in steady])), 1),
        "groups_in_flight_mean": round(float(np.mean([m["groups_in_flight"] for m in steady])), 1),
        "groups_per_step_mean": round(groups / len(steady), 1),
        "stale_tokens_masked": sum(m.get("stale_tokens_masked", 0) for m in steady),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 1.5], help="lognormal σ of rollout durations")
    ap.add_argument("--median-s", type=float, default=1.0, help="median rollout duration (harness waits)")
    ap.add_argument("--staleness", type=int, default=4, help="async arm's trainer.max_policy_lag")
    ap.add_argument("--groups", type=int, default=4, help="trainer.groups_per_step")
    ap.add_argument("--max-groups", type=int, default=12, help="async_fill arm's trainer.max_groups_per_step")
    ap.add_argument("--group-size", type=int, default=2, help="trainer.group_size")
    ap.add_argument("--top", choices=ARMS[1:], default="async_mask", help="the arm of the top-level figures")
    ap.add_argument("--async-steps", type=int, default=30)
    ap.add_argument("--sync-steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(1)  # two threads on 2 shared cores wait on each other's barrier: several times slower
    tokenizer = load_tokenizer("tiny-qwen3")
    task_id = next(t.id for t in load_tasks(resolve_suite("mini"), split="train"))
    root = Path(tempfile.mkdtemp(prefix="clawgym-bench-long-tail-"))
    by_sigma: dict[str, dict] = {}
    for sigma in args.sigmas:
        figures = {name: arm(name, sigma, args, tokenizer, task_id, root) for name in ARMS}
        for name in ARMS[1:]:
            figures[name]["rollouts_per_min_vs_sync"] = round(
                figures[name]["rollouts_per_min"] / figures["sync"]["rollouts_per_min"], 2
            )
        by_sigma[f"{sigma:g}"] = figures
        print(f"sigma {sigma:g}: {json.dumps(figures)}", flush=True)
    top = by_sigma.get("1.5", by_sigma[f"{args.sigmas[-1]:g}"])[args.top]
    keys = ("trainer_busy_fraction", "rollouts_per_min", "rollouts_per_min_vs_sync", "dropped_groups",
            "mean_staleness", "max_staleness")  # fmt: skip
    figures = {k: top[k] for k in keys} | {"arm": args.top, "staleness": args.staleness, "sigma": by_sigma}
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
