"""The docker-compose deployment measured: image builds, `up`, a training run with crashes, and its
rollout throughput against the embedded mode on the same task batch.

    .venv/bin/python bench/compose.py                 # builds from the cache, the run, the comparison
    .venv/bin/python bench/compose.py --cold          # each image first built with --no-cache (~40 min
                                                      # on 2 cores: every image rebuilds its venvs)

1. Builds every image with deploy/images.py (stand-ins where no registry answers): with --cold first
   with --no-cache, then from the cache; seconds and size per image.
2. `docker compose up --wait` (the seconds until every service is healthy), then the training run of
   tests/deploy/compose_run.yaml, crashing the proxy and the store on the way; what the run left
   (steps, checkpoint versions the inference container served, calls, acknowledged calls lost)
   and how many dashboard panel queries return data for it.
3. The same batch (held-out tasks × samples, reference harness) through the compose stack's
   orchestrator and through an embedded runtime serving the same checkpoint (copied out of the
   compose volume), one after the other on this machine: rollouts per minute of each, and the ratio.

The LAST line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deploy.compose_stack import ComposeStack  # noqa: E402

RUN_CONFIG = REPO / "tests" / "deploy" / "compose_run.yaml"


def build(cold: bool, wheels: str) -> dict:
    argv = [sys.executable, str(REPO / "deploy" / "images.py"), "build", "--standins", "--quiet"]
    argv += ["--torch-wheels", wheels] if wheels else []
    argv += ["--no-cache"] if cold else []
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def batch_throughput(cfg, spec, checkpoint: tuple[int, str] | None) -> tuple[float, int]:
    """(seconds, rollouts) of one evaluation batch on a runtime of `cfg` (embedded or services)."""
    from clawgym_app.runtime import Runtime

    with Runtime.open(cfg) as rt:
        if checkpoint is not None:
            rt.load_checkpoint(*checkpoint)
        version = rt.served_version()
        result = rt.evaluate(spec, version=version)
    rollouts = sum(sum(t.n for t in h.counts) for h in result.harnesses.values())
    return result.seconds, rollouts


def compare(stack: ComposeStack, tasks: int, samples: int, latest: int) -> dict:
    from clawgym.config import load_config
    from clawgym.evaluation.select import eval_spec

    base = load_config(RUN_CONFIG)
    e = base.evaluation.model_copy(update={"tasks": tasks, "samples": samples})
    spec = eval_spec(e, base.trainer.suite, ["reference"])
    p = stack.ports
    services = load_config(
        RUN_CONFIG,
        rpc={"secret": stack.env["CLAWGYM_RPC_SECRET"]},  # the stack's own (compose_stack makes one)
        store={"grpc_url": f"127.0.0.1:{p['CLAWGYM_STORE_PORT']}"},
        inference={"grpc_url": f"127.0.0.1:{p['CLAWGYM_INFERENCE_PORT']}"},
        orchestrator={
            "grpc_url": f"127.0.0.1:{p['CLAWGYM_ORCHESTRATOR_PORT']}",
            "proxy_url": "http://proxy:8080",
        },
    )
    compose_s, compose_n = batch_throughput(services, spec, None)
    # the embedded runtime serves the checkpoint the compose inference serves, copied out of the volume
    folder = Path(tempfile.mkdtemp(prefix="clawgym-bench-compose-"))
    try:
        subprocess.run(
            ["docker", "cp", f"{stack.container('trainer')}:/data/checkpoints", str(folder)], check=True
        )
        uri = next((folder / "checkpoints").rglob(f"v{latest:06d}"))
        embedded = load_config(
            RUN_CONFIG,
            store={"grpc_url": "", "url": f"sqlite:///{folder}/bench.db", "bus_url": "memory://"},
            inference={"grpc_url": ""},
            orchestrator={"grpc_url": "", "proxy_url": ""},
            proxy={"redis_url": ""},
            sandbox={"backend": "local"},
        )
        embedded_s, embedded_n = batch_throughput(embedded, spec, (latest, str(uri)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    compose_rpm, embedded_rpm = compose_n / compose_s * 60, embedded_n / embedded_s * 60
    return {
        "batch_rollouts": compose_n,
        "compose_rollouts_per_min": round(compose_rpm, 2),
        "embedded_rollouts_per_min": round(embedded_rpm, 2),
        "rollouts_per_min_vs_embedded": round(compose_rpm / embedded_rpm, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cold", action="store_true", help="also build each image with --no-cache first")
    parser.add_argument(
        "--torch-wheels", default="/opt/wheels", help="folder with the CPU torch wheel ('' = index)"
    )
    parser.add_argument("--tasks", type=int, default=8, help="held-out tasks in the comparison batch")
    parser.add_argument("--samples", type=int, default=2, help="samples per task in the comparison batch")
    args = parser.parse_args()
    wheels = args.torch_wheels if args.torch_wheels and Path(args.torch_wheels).is_dir() else ""

    figures: dict = {}
    if args.cold:
        figures["build_cold"] = build(cold=True, wheels=wheels)
    figures["build_cached"] = build(cold=False, wheels=wheels)
    stack = ComposeStack("clawgym-bench", RUN_CONFIG, local=True)
    stack.down()
    try:
        up_s = stack.up()
        facts = stack.follow_run(crash=["proxy", "store"])
        panels = stack.panel_results(facts.started_at - 30, facts.ended_at + 30)
        train_minutes = (facts.ended_at - facts.started_at) / 60
        comparison = compare(stack, args.tasks, args.samples, latest=max(facts.checkpoints))
    finally:
        stack.down()
    left_running = stack.running()
    rollouts = sum(facts.rollouts.values())
    figures |= {
        "up_s": round(up_s, 1),
        "steps": facts.steps,
        "versions_served": len(facts.versions_served),
        "versions": facts.versions_served,
        "calls": facts.calls,
        "acked_calls": facts.acked_calls,
        "calls_lost": facts.calls_lost,
        "crashed": facts.crashed,
        "restarts": facts.restarts,
        "pass_at_1": facts.pass_at_1,
        "train_run_minutes": round(train_minutes, 2),
        "train_rollouts": rollouts,
        "panels_total": len(panels),
        "panels_with_data": sum(1 for n in panels.values() if n > 0),
        "panels_empty": [q for q, n in panels.items() if n == 0],
        "left_running_after_down": len(left_running),
        "image_mb": {k: round(v["bytes"] / 1e6) for k, v in figures["build_cached"].items()},
        **comparison,
    }
    for key, value in figures.items():
        if key not in ("build_cold", "build_cached"):
            print(f"{key}: {value}", file=sys.stderr)
    print(json.dumps(figures))


if __name__ == "__main__":
    t0 = time.monotonic()
    main()
    print(f"bench/compose.py: {time.monotonic() - t0:.0f} s", file=sys.stderr)
