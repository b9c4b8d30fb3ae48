"""Data-parallel FSDP2 on CPU: 2 ranks (gloo, under torchrun) make the same update as 1 rank.

Both runs take one step (two epochs: PPO's reuse with ratios) of GRPO and of PPO on the same batch
(3 groups of branching traces, split into micro-batches; rank 1 gets fewer and runs zero-weighted
dummies). The checkpoints they save (gathered from shards on 2 ranks) hold the same weights and
optimizer state (Adam's moments: the gradients), and the step's diagnostics agree. `trainer.fsdp`'s
memory settings (no resharding, CPU offload, activation checkpointing) keep the update exact;
bfloat16 mixed precision moves the weights as float32 does, up to bfloat16's rounding.
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


def _torchrun(n: int, out: Path, settings: dict | None = None) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={n}",
            str(HELPER),
            str(out),
            json.dumps(settings or {}),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, (
        f"torchrun with {n} ranks failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one")
    _torchrun(1, out)
    return out


@pytest.mark.slow
def test_two_fsdp_ranks_on_cpu_make_the_same_update_as_one_rank(one_rank, tmp_path):
    _torchrun(2, tmp_path / "two")
    _assert_same_update(one_rank, tmp_path / "two")


@pytest.mark.slow
def test_ppo_value_passes_on_two_fsdp_ranks_make_the_same_update_as_one_rank(tmp_path):
    """`value_epochs`: the value head's own steps after the update run in lockstep on sharded weights
    (rank 1 has fewer value rows) and land where one rank's do."""
    settings = {"algorithm": {"value_epochs": 3, "value_lr": 1e-2}}
    _torchrun(1, tmp_path / "one", settings)
    _torchrun(2, tmp_path / "two", settings)
    _assert_same_update(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_momentum_free_adamw_steps_sharded_weights_as_one_rank_does(tmp_path):
    """β1 = 0 (`MomentumFreeAdamW`, updating each rank's shard in chunks) on two FSDP2 ranks."""
    settings = {"algorithm": {"betas": (0.0, 0.999)}}
    _torchrun(1, tmp_path / "one", settings)
    _torchrun(2, tmp_path / "two", settings)
    _assert_same_update(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_a_step_filled_in_rounds_on_two_fsdp_ranks_makes_the_one_rank_update_of_all_its_trees(tmp_path):
    """`update.Fill` under FSDP2: the first group, then the two others in later rounds, scattered by
    rank 0 (rank 1 gets nothing in some rounds and runs dummies in lockstep), land where one rank's
    update of the three at once does (unwhitened PPO: a whitened step cannot fill)."""
    unwhitened = {"algorithm": {"whiten_advantages": False}}
    _torchrun(1, tmp_path / "one", unwhitened)
    _torchrun(2, tmp_path / "two", unwhitened | {"fill": True})
    _assert_same_update(tmp_path / "one", tmp_path / "two")


@pytest.mark.slow
def test_fsdp_memory_settings_keep_the_update_exact(one_rank, tmp_path):
    lean = {
        "fsdp": {"reshard_after_forward": False, "cpu_offload": True},
        "activation_checkpointing": True,
    }
    _torchrun(2, tmp_path / "two", lean)
    _assert_same_update(one_rank, tmp_path / "two")


@pytest.mark.slow
def test_the_top_layers_alone_on_two_fsdp_ranks_make_the_one_rank_update(tmp_path):
    """`trainer.trained_layers`: the frozen embeddings, LM head and lower layers sit in FSDP2's units beside
    trained ones (the root's final norm); the two ranks' update matches one rank's, the frozen ones' none."""
    top = {"trained_layers": 2, "activation_checkpointing": True}
    _torchrun(1, tmp_path / "one", top)
    _torchrun(2, tmp_path / "two", top)
    _assert_same_update(tmp_path / "one", tmp_path / "two")
    initial = load_model("tiny-qwen3").state_dict()
    two = load_file(str(tmp_path / "two" / "grpo" / "model.safetensors"))
    frozen = [k for k in two if k.startswith(("model.embed_tokens", "model.layers.0.", "model.layers.1."))]
    assert frozen and all(torch.equal(two[k], initial[k]) for k in frozen), "the frozen weights must not move"


@pytest.mark.slow
def test_bfloat16_mixed_precision_keeps_float32_weights_and_moves_them_as_float32_does(one_rank, tmp_path):
    _torchrun(2, tmp_path / "two", {"fsdp": {"param_dtype": "bfloat16"}})
    initial = load_model("tiny-qwen3").state_dict()
    for algorithm in ("grpo", "ppo"):
        one = load_file(str(one_rank / algorithm / "model.safetensors"))
        two = load_file(str(tmp_path / "two" / algorithm / "model.safetensors"))
        assert {t.dtype for t in two.values()} == {torch.float32}, "master weights stay float32"
        d_one = torch.cat([(one[k] - initial[k]).flatten() for k in one])
        d_two = torch.cat([(two[k] - initial[k]).flatten() for k in one])
        assert (d_one - d_two).abs().max() > 1e-5, f"{algorithm}: bfloat16 compute must differ from float32"
        cosine = torch.nn.functional.cosine_similarity(d_one, d_two, dim=0).item()
        relative = ((d_one - d_two).norm() / d_one.norm()).item()
        # measured: cosine 0.998-0.999, relative 0.05-0.07 (bfloat16's 8-bit mantissa in the forward)
        assert cosine > 0.98 and relative < 0.25, f"{algorithm}: cosine {cosine:.4f}, relative {relative:.3f}"


def _assert_same_update(one_dir: Path, two_dir: Path) -> None:
    initial = load_model("tiny-qwen3").state_dict()
    for algorithm in ("grpo", "ppo"):
        one = load_file(str(one_dir / algorithm / "model.safetensors"))
        two = load_file(str(two_dir / algorithm / "model.safetensors"))
        assert one.keys() == two.keys(), f"{algorithm}: the two checkpoints hold different tensors"
        moved = max((one[k] - initial[k]).abs().max().item() for k in one)
        assert moved > 1e-4, f"{algorithm}: test setup: the step must change the weights (moved {moved})"
        for k in one:
            # Adam turns float noise in a near-zero gradient coordinate into up to ~lr·1e-2; a wrong
            # update (a missing rank's gradient, a wrong normaliser) moves coordinates by ~lr = 1e-3.
            torch.testing.assert_close(two[k], one[k], atol=1e-5, rtol=1e-4, msg=f"{algorithm}: {k} differs")
        d1 = json.loads((one_dir / algorithm / "diagnostics.json").read_text())
        d2 = json.loads((two_dir / algorithm / "diagnostics.json").read_text())
        assert d2["world"] == 2 and d1["packs_rank0"] > d2["packs_rank0"], "the batch must really be split"
        for key in ("loss", "grad_norm", "approx_kl", "entropy", "logprob_mismatch"):
            assert d2["diagnostics"][key] == pytest.approx(d1["diagnostics"][key], rel=1e-4, abs=1e-6), (
                f"{algorithm}: diagnostic {key} differs between 1 and 2 ranks"
            )
        s1 = torch.load(one_dir / algorithm / "trainer_state.pt", weights_only=False)["optimizer"]
        s2 = torch.load(two_dir / algorithm / "trainer_state.pt", weights_only=False)["optimizer"]
        for name, state in s1["state"].items():  # Adam's moment: the (clipped) gradients, strictly
            moment, atol = ("exp_avg", 1e-8) if "exp_avg" in state else ("exp_avg_sq", 1e-12)  # β1 = 0: g²
            torch.testing.assert_close(
                s2["state"][name][moment],
                state[moment],
                atol=atol,
                rtol=1e-4,
                msg=f"{algorithm}: {name}",
            )
        if algorithm == "ppo":
            v1 = torch.load(one_dir / "ppo" / "trainer_state.pt", weights_only=False)["value_head"]
            v2 = torch.load(two_dir / "ppo" / "trainer_state.pt", weights_only=False)["value_head"]
            torch.testing.assert_close(v2["proj.weight"], v1["proj.weight"], atol=1e-5, rtol=1e-4)
