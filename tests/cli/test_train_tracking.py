"""Experiment tracking of `clawgym train`: TensorBoard event files and an offline W&B run, written
during a real embedded run, carrying the report's figures under the report's names."""

import json
import struct
import sys
from pathlib import Path

import pytest

from clawgym.errors import FailedPrecondition
from clawgym.tracking import TrackingConfig, eval_scalars, step_scalars
from clawgym.tracking.writers import WandbSink, check_available
from clawgym.trainer.metrics import STEP_KEYS
from tests.cli.conftest import tensorboard_scalars


def _wandb_history(path: Path) -> tuple[str, dict[str, dict[int, float]]]:
    """(run id, name -> {step: value}) of an offline W&B run file: a LevelDB-style log (32 KiB blocks
    of chunks with a 7-byte header: crc32, length, type) of `wandb_internal_pb2.Record`s after a
    7-byte ":W&B" header."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    run_id, history, pos, chunks = "", {}, 7, b""
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a header is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunks += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind not in (1, 4):  # FULL or LAST end a record; FIRST and MIDDLE continue it
            continue
        record = pb.Record()
        record.ParseFromString(chunks)
        chunks = b""
        if record.WhichOneof("record_type") == "run":
            run_id = record.run.run_id
        elif record.WhichOneof("record_type") == "history":
            for item in record.history.item:
                name = item.key or "/".join(item.nested_key)
                if not name.startswith("_"):  # W&B's own _step, _runtime, _timestamp
                    history.setdefault(name, {})[record.history.step.num] = json.loads(item.value_json)
    return run_id, history


@pytest.mark.slow
def test_train_writes_tensorboard_and_wandb_with_the_reports_names_and_values(
    clawgym, run_config, tmp_path, monkeypatch
):
    """Every step figure of report.json is a TensorBoard scalar of the same name at its step, every
    evaluation's Pass@1 is `eval/<harness>/pass@1` at its version, and nothing else is logged; the
    W&B run (offline) is the store run, with the same names in its summary."""
    config = run_config(
        proxy={"max_new_tokens": 12},
        # An entropy term gives every group a gradient, so that each step has the update's diagnostics
        # (a group whose rewards are all equal is otherwise skipped, and the tiny policy rarely passes).
        trainer={"run_name": "tracked", "steps": 2, "group_size": 2, "groups_per_step": 2,
                 "algorithm": {"lr": 1e-4, "entropy_coef": 1e-3}, "sweep_interval_s": 1.0},
        evaluation={"tasks": 2},
        tracking={"tensorboard": True, "wandb": {"project": "clawgym-test", "mode": "offline"}},
    )  # fmt: skip
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):  # W&B's own files stay out of $HOME
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run"), "--json")
    assert done.returncode == 0, f"clawgym train failed:\n{done.stdout}\n{done.stderr}"
    report = json.loads((tmp_path / "run" / "report.json").read_text())

    expected: dict[str, dict[int, float]] = {}
    for s in report["steps"]:
        for name, value in step_scalars(s).items():
            expected.setdefault(name, {})[s["step"]] = value
    for e in report["evals"]:
        pass_at = {int(k): v for k, v in e["pass_at"].items()}
        for name, value in eval_scalars(e["harness"], pass_at, e["mean_reward"]).items():
            expected.setdefault(name, {})[e["version"]] = value
    logged = tensorboard_scalars(tmp_path / "run" / "tensorboard")

    assert {
        "loss",
        "reward",
        "approx_kl",
        "entropy",
        "harness/reference/pass_rate",
        "eval/reference/pass@1",
    } <= set(logged), f"the diagnostics and Pass@1 are logged: {sorted(logged)}"
    assert set(logged) == set(expected), (
        f"TensorBoard's names are the report's: only TB {set(logged) - set(expected)}, "
        f"only report {set(expected) - set(logged)}"
    )
    for name, points in expected.items():
        assert logged[name] == pytest.approx(points, rel=1e-6), (
            f"{name}: TensorBoard {logged[name]} != report {points}"
        )
    assert logged["eval/reference/pass@1"].keys() == {0, 2}, "Pass@1 before (v0) and after (v2)"
    plain = {n for n in logged if not n.startswith(("harness/", "eval/"))}
    assert plain <= set(STEP_KEYS), f"step names are the Prometheus/store step keys: {plain - set(STEP_KEYS)}"

    (offline,) = (tmp_path / "run" / "wandb" / "wandb").glob("offline-run-*/run-*.wandb")
    run_id, history = _wandb_history(offline)
    assert run_id == report["run_id"], f"the W&B run is the store run ({report['run_id']}), not {run_id}"
    assert set(history) == set(expected), (
        f"W&B's names are the report's: only W&B {set(history) - set(expected)}, "
        f"only report {set(expected) - set(history)}"
    )
    for name, points in expected.items():
        assert history[name] == pytest.approx(points), f"{name}: W&B {history[name]} != report {points}"


def test_wandb_without_the_package_is_a_clear_error(monkeypatch, tmp_path):
    """Enabling W&B without the [wandb] extra says which extra to install, before a run starts."""
    monkeypatch.setitem(sys.modules, "wandb", None)  # what `import wandb` sees where it is not installed
    cfg = TrackingConfig(wandb={"project": "p", "mode": "offline"})
    with pytest.raises(FailedPrecondition, match=r"clawgym\[wandb\]"):
        WandbSink(cfg, "run", "name", tmp_path, {})
    with pytest.raises(FailedPrecondition, match=r"clawgym\[wandb\]"):
        check_available(cfg)  # what `clawgym train` checks before loading the model
