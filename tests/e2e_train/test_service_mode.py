"""The same training loop in service mode: store, inference, proxy and orchestrator each a real
`clawgym serve` process on a loopback port (gRPC between them, PostgreSQL + Redis for state), and
the trainer — `clawgym train --spawn-services`, the app's own process — driving them for 2 steps."""

import json
import subprocess
import sys

import pytest
import yaml
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.slow
CLAWGYM = [sys.executable, "-c", "from clawgym_app.cli import main; main()"]


def test_two_grpo_steps_across_service_processes_commit_checkpoints_and_reload_the_inference_service(
    learnable_run, pg_url, redis_url, tmp_path
):
    config = tmp_path / "run.yaml"
    run = learnable_run(
        store={"url": pg_url, "bus_url": redis_url}, evaluation={"samples": 2, "split": "test"},
        run_name="services", steps=2, group_size=4, groups_per_step=2,
    )  # fmt: skip
    config.write_text(yaml.safe_dump(run))
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
    assert evals == [0, 2], f"evaluations before and after were recorded: {evals}"
    assert (tmp_path / "run" / "report.md").is_file(), "the report is written in service mode too"
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
