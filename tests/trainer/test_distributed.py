"""Data-parallel FSDP2 on CPU: 2 ranks (gloo, under torchrun) make the same update as 1 rank.

Both runs take one step (two epochs: PPO's reuse with ratios) of GRPO and of PPO on the same batch
(3 groups of branching traces, split into micro-batches; rank 1 gets fewer and runs zero-weighted
dummies). The checkpoints they save (gathered from shards on 2 ranks) hold the same weights and
optimizer state (Adam's moments: the gradients), and the step's diagnostics agree.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from clawgym.policies import load_model

HELPER = Path(__file__).with_name("fsdp_step.py")


def _torchrun(n: int, out: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={n}",
            str(HELPER),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"torchrun with {n} ranks failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )


@pytest.mark.slow
def test_two_fsdp_ranks_on_cpu_make_the_same_update_as_one_rank(tmp_path):
    _torchrun(1, tmp_path / "one")
    _torchrun(2, tmp_path / "two")
    initial = load_model("tiny-qwen3").state_dict()
    for algorithm in ("grpo", "ppo"):
        one = load_file(str(tmp_path / "one" / algorithm / "model.safetensors"))
        two = load_file(str(tmp_path / "two" / algorithm / "model.safetensors"))
        assert one.keys() == two.keys(), f"{algorithm}: the two checkpoints hold different tensors"
        moved = max((one[k] - initial[k]).abs().max().item() for k in one)
        assert moved > 1e-4, f"{algorithm}: test setup: the step must change the weights (moved {moved})"
        for k in one:
            # Adam turns float noise in a near-zero gradient coordinate into up to ~lr·1e-2; a wrong
            # update (a missing rank's gradient, a wrong normaliser) moves coordinates by ~lr = 1e-3.
            torch.testing.assert_close(two[k], one[k], atol=1e-5, rtol=1e-4, msg=f"{algorithm}: {k} differs")
        d1 = json.loads((tmp_path / "one" / algorithm / "diagnostics.json").read_text())
        d2 = json.loads((tmp_path / "two" / algorithm / "diagnostics.json").read_text())
        assert d2["world"] == 2 and d1["packs_rank0"] > d2["packs_rank0"], "the batch must really be split"
        for key in ("loss", "grad_norm", "approx_kl", "entropy", "logprob_mismatch"):
            assert d2["diagnostics"][key] == pytest.approx(d1["diagnostics"][key], rel=1e-4, abs=1e-6), (
                f"{algorithm}: diagnostic {key} differs between 1 and 2 ranks"
            )
        s1 = torch.load(tmp_path / "one" / algorithm / "trainer_state.pt", weights_only=False)["optimizer"]
        s2 = torch.load(tmp_path / "two" / algorithm / "trainer_state.pt", weights_only=False)["optimizer"]
        for name, state in s1["state"].items():  # Adam's first moment: the (clipped) gradients, strictly
            torch.testing.assert_close(
                s2["state"][name]["exp_avg"],
                state["exp_avg"],
                atol=1e-8,
                rtol=1e-4,
                msg=f"{algorithm}: {name}",
            )
        if algorithm == "ppo":
            v1 = torch.load(tmp_path / "one" / "ppo" / "trainer_state.pt", weights_only=False)["value_head"]
            v2 = torch.load(tmp_path / "two" / "ppo" / "trainer_state.pt", weights_only=False)["value_head"]
            torch.testing.assert_close(v2["proj.weight"], v1["proj.weight"], atol=1e-5, rtol=1e-4)
