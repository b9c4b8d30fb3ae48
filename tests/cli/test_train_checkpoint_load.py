"""A run whose checkpoint cannot be loaded ends with an error naming that checkpoint, never a traceback
or a half-loaded policy: a real `clawgym train` (embedded, tiny-qwen3, the reference harness) makes
checkpoint v1, its safetensors file is damaged on disk, and `clawgym train --resume` must refuse it.

(An engine that refuses a checkpoint during a step: tests/trainer/test_publish.py.)
"""

import sqlite3

import pytest
from safetensors.torch import load_file, save_file

pytestmark = pytest.mark.slow


def _squeezed(text: str) -> str:
    return "".join(text.split())  # rich wraps long lines wherever it likes


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _drop_a_tensor(path):
    tensors = load_file(path)
    tensors.pop(next(name for name in tensors if "mlp.down_proj" in name))
    save_file(tensors, path, {"format": "pt"})


def test_a_run_resumed_from_a_damaged_checkpoint_ends_with_an_error_naming_it(clawgym, run_config, tmp_path):
    """A truncated file (unreadable) and a file lacking one tensor (HF alone would initialise it at
    random with a warning) both end the run with exit 2 and `cannot load checkpoint 1 from <folder>`."""
    config = run_config(
        proxy={"max_new_tokens": 8},
        orchestrator={"harness_settings": {"reference": {"max_turns": 1, "max_tokens": 8}}},
        trainer={"run_name": "damaged", "steps": 1, "group_size": 2, "groups_per_step": 1,
                 "sweep_interval_s": 1.0, "save_optimizer_state": False},
        evaluation={"at_start": False, "at_end": False, "tasks": 1},
    )  # fmt: skip
    first = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / "run1"))
    assert first.returncode == 0, f"the first run failed:\n{first.stdout}\n{first.stderr}"
    folder = tmp_path / "checkpoints" / "damaged" / "v000001"
    weights = folder / "model.safetensors"
    intact = weights.read_bytes()
    for damage in (_truncate, _drop_a_tensor):
        weights.write_bytes(intact)
        damage(weights)
        done = clawgym("train", "-c", str(config), "--run-dir", str(tmp_path / damage.__name__), "--resume",
                       "--steps", "2")  # fmt: skip
        out = done.stdout + done.stderr
        assert done.returncode == 2, f"{damage.__name__}: the run must fail as a clawgym error:\n{out}"
        assert _squeezed(f"cannot load checkpoint 1 from {folder}") in _squeezed(out), (
            f"{damage.__name__}: the error names the checkpoint:\n{out}"
        )
        assert "Traceback" not in out, f"{damage.__name__}: an error, not a crash:\n{out}"
    with sqlite3.connect(tmp_path / "store.db") as db:
        versions = [v for (v,) in db.execute("SELECT version FROM checkpoints")]
    assert versions == [1], f"the refused resumes trained nothing: {versions}"
