"""The same training run in service mode: store, inference, proxy and orchestrator each a real
`clawgym serve` process on a loopback port (gRPC between them, PostgreSQL + Redis for state), and
the trainer driving them for 2 steps — `clawgym train --spawn-services` (the app's own process) and
`clawgym serve trainer` (the trainer service, as compose and the chart run it). Both run the
library's one `Run`, so both leave the same run folder: report, summary, TensorBoard events, and
the evaluations before, every step, and after."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text

from clawgym.config import ClawgymConfig
from clawgym_app.runtime.services import ServiceStack

pytestmark = pytest.mark.slow
CLAWGYM = [sys.executable, "-c", "from clawgym_app.cli import main; main()"]


def recorded_evals(pg_url: str) -> list[int]:
    engine = create_engine(pg_url)
    with engine.connect() as db:
        evals = db.execute(text("SELECT version FROM evals ORDER BY version")).scalars().all()
    engine.dispose()
    return evals


def check_run_folder(folder: Path, steps: int) -> dict:
    """What every run leaves in its folder, whoever drove it; returns its summary."""
    for name in ("report.md", "report.json", "summary.json"):
        assert (folder / name).is_file(), f"{name} is missing from {sorted(p.name for p in folder.iterdir())}"
    events = list((folder / "tensorboard").glob("events.out.tfevents.*"))
    assert events, f"TensorBoard event files in {folder / 'tensorboard'}"
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["steps"] == steps and "pass1_after" in summary, summary
    report = json.loads((folder / "report.json").read_text())
    labels = sorted({e["label"] for e in report["evals"]})
    assert labels == sorted({"before", "after", *(f"step {v}" for v in range(1, steps))}), (
        f"the report holds the evaluations before, every step and after: {labels}"
    )
    return summary


def test_two_grpo_steps_across_service_processes_commit_checkpoints_and_reload_the_inference_service(
    learnable_run, pg_url, redis_url, tmp_path
):
    config = tmp_path / "run.yaml"
    run = learnable_run(
        store={"url": pg_url, "bus_url": redis_url}, evaluation={"samples": 2, "split": "test", "every_steps": 1},
        run_name="services", steps=2, group_size=4, groups_per_step=2,
    )  # fmt: skip
    config.write_text(yaml.safe_dump({**run, "tracking": {"tensorboard": True}}))
    done = subprocess.run(
        [*CLAWGYM, "train", "-c", str(config), "--spawn-services", "--run-dir", str(tmp_path / "run"), "--json"],
        capture_output=True, text=True, timeout=900, cwd=tmp_path,
    )  # fmt: skip
    logs = "".join(
        f"\n--- {p.name}\n{p.read_text()[-3000:]}"
        for p in sorted((tmp_path / "run" / "services").glob("*.log"))
    )
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr[-5000:]}{logs}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 2 and "pass1_after" in summary, f"2 steps, evaluated after: {summary}"
    assert summary["mode"].startswith("services (orchestrator 127.0.0.1:"), f"through the services: {summary}"

    engine = create_engine(pg_url)
    with engine.connect() as db:
        versions = db.execute(text("SELECT version FROM checkpoints ORDER BY version")).scalars().all()
        harnesses = db.execute(text("SELECT DISTINCT harness FROM rollouts")).scalars().all()
        calls = db.execute(text("SELECT count(*) FROM calls")).scalar_one()
        policy_versions = db.execute(text("SELECT DISTINCT policy_version FROM calls")).scalars().all()
        evals = db.execute(text("SELECT version FROM evals ORDER BY version")).scalars().all()
    engine.dispose()
    assert versions == [1, 2], f"both steps committed their checkpoint to PostgreSQL: {versions}"
    assert harnesses == ["reference"] and calls >= 16, f"the proxy service recorded the calls ({calls})"
    assert 2 in policy_versions, (
        f"the inference service reloaded v2 before the final evaluation: {policy_versions}"
    )
    assert evals == [0, 1, 2], f"evaluations before, every step and after were recorded: {evals}"
    check_run_folder(tmp_path / "run", steps=2)
    services = tmp_path / "run" / "services"
    secret_file = services / "rpc-secret"
    assert secret_file.stat().st_mode & 0o777 == 0o600, "the stack's rpc secret is readable by its user only"
    secret = secret_file.read_text()
    assert len(secret) >= 32, "a generated secret"
    stack = yaml.safe_load((services / "stack.yaml").read_text())
    assert stack["rpc"] == {"secret_file": str(secret_file.resolve())}, "the services read it from the file"
    written = [p for p in (tmp_path / "run").rglob("*") if p.is_file() and p != secret_file]
    leaked = [str(p) for p in written if secret in p.read_text(errors="replace")]
    assert not leaked, f"the rpc secret must appear in no config, log or report: {leaked}"


def test_serve_trainer_runs_the_same_run_into_its_run_folder(learnable_run, pg_url, redis_url, tmp_path):
    """`clawgym serve trainer` against the four services: the evaluations every step, the trackers,
    the summary and the report land in `trainer.run_dir` as they do for `clawgym train`."""
    folder = tmp_path / "served"
    run = learnable_run(
        store={"url": pg_url, "bus_url": redis_url}, evaluation={"samples": 1, "split": "test", "every_steps": 1},
        run_name="served", steps=2, group_size=4, groups_per_step=2, run_dir=str(folder), port=0, metrics_port=0,
    )  # fmt: skip
    cfg = ClawgymConfig(**{**run, "tracking": {"tensorboard": True}})
    with ServiceStack(cfg, tmp_path / "stack") as stack:
        served = stack.start()
        config = tmp_path / "trainer.yaml"
        config.write_text(yaml.safe_dump(served.model_dump(mode="json"), sort_keys=False))
        done = subprocess.run(
            [*CLAWGYM, "serve", "trainer", "-c", str(config)],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
        )  # fmt: skip
        logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(stack.folder.glob("*.log")))
    assert done.returncode == 0, f"serve trainer failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}{logs}"
    assert recorded_evals(pg_url) == [0, 1, 2], "evaluations before, every step and after were recorded"
    summary = check_run_folder(folder, steps=2)
    assert summary["eval_samples"] == 1, summary
    assert "step 2 of 2" in done.stderr and "evaluation after" in done.stderr, (
        f"the service shows the run in its log: {done.stderr[-3000:]}"
    )
