"""Versions kept only by `keep_every` are made lean: bfloat16 weights, no optimizer state, half the
disk; an engine still serves them; the newest (the resume point) stays as written."""

from __future__ import annotations

import json

import torch
from safetensors.torch import load_file

from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.distributed import World
from clawgym.trainer.optim import make_optimizer
from clawgym.trainer.policy import build_policy


def _save_versions(cfg, tok, versions: range) -> dict[str, torch.Tensor]:
    """Writes each version as the trainer does (weights, optimizer with moments), pruning after each."""
    built = build_policy(cfg)
    optimizer, scheduler = make_optimizer(built.module, cfg.algorithm, cfg.steps)
    for p in built.module.parameters():  # moments to save: one AdamW step on a made-up gradient
        p.grad = torch.ones_like(p) * 1e-3
    optimizer.step()
    for v in versions:
        uri, twin = ckpt.version_uri(cfg, v), ckpt.becomes_lean(cfg, v)  # as the trainer saves
        ckpt.save_checkpoint(built, optimizer, scheduler, tok, uri, {"version": v}, World(), lean_twin=twin)
        assert (ckpt.Path(uri) / ckpt.LEAN_FILE).is_file() == twin, f"v{v}: a bf16 twin only where kept lean"
        ckpt.prune_checkpoints(cfg, v)
    return ckpt.serving_weights(built)


def test_a_version_kept_by_keep_every_turns_lean_and_the_newest_stays_whole(trainer_cfg, tiny_tok, runner, engine):
    cfg = trainer_cfg(keep_checkpoints=1, keep_every=2)
    served = _save_versions(cfg, tiny_tok, range(1, 4))
    folder = ckpt.run_folder(cfg)
    lean, newest = f"{folder}/v000002", f"{folder}/v000003"
    assert sorted(p.split("/")[-1] for p in (lean, newest)) == sorted(
        p.name for p in ckpt.Path(folder).glob("v*")
    ), "v1 pruned, v2 kept by keep_every, v3 the newest"

    lean_weights, whole_weights = load_file(f"{lean}/model.safetensors"), load_file(f"{newest}/model.safetensors")
    assert {t.dtype for t in lean_weights.values()} == {torch.bfloat16}, "float weights rewritten in bf16"
    assert {t.dtype for t in whole_weights.values()} == {torch.float32}, "the newest stays as trained"
    assert all(torch.equal(lean_weights[k], served[k].to(torch.bfloat16)) for k in served), "bf16 of the same weights"
    lean_size = ckpt.Path(f"{lean}/model.safetensors").stat().st_size
    whole_size = ckpt.Path(f"{newest}/model.safetensors").stat().st_size
    assert lean_size < 0.51 * whole_size, (lean_size, whole_size)
    lean_state, whole_state = ckpt.load_trainer_state(ckpt.Path(lean)), ckpt.load_trainer_state(ckpt.Path(newest))
    assert lean_state["optimizer"] is None and whole_state["optimizer"] is not None, "moments only where resumable"
    assert lean_state["scheduler"] == whole_state["scheduler"] and lean_state["version"] == 2
    assert json.loads(ckpt.Path(f"{lean}/config.json").read_text()).get("torch_dtype", "bfloat16") == "bfloat16"
    assert not ckpt.make_lean(ckpt.Path(lean)), "a lean folder is left as it is"
    assert not list(ckpt.Path(folder).rglob(ckpt.LEAN_FILE)), "v2's bf16 twin, written at save, became its weights"

    copy = ckpt.Path(folder).parent / "old-run-v3"  # a folder saved without a twin is converted
    ckpt.shutil.copytree(newest, copy)
    assert ckpt.make_lean(copy) and load_file(f"{copy}/model.safetensors").keys() == whole_weights.keys()
    assert all(t.dtype == torch.bfloat16 for t in load_file(f"{copy}/model.safetensors").values())

    runner.run(engine.load_weights(2, lean))
    name, param = next((n, p) for n, p in engine.model.named_parameters() if n in served)
    assert param.dtype == torch.float32 and torch.equal(param.detach(), served[name].to(torch.bfloat16).float()), (
        "an engine serves a lean version at bfloat16 precision in its own dtype"
    )


def test_lean_kept_checkpoints_off_keeps_every_version_as_written(trainer_cfg, tiny_tok):
    cfg = trainer_cfg(keep_checkpoints=1, keep_every=2, lean_kept_checkpoints=False)
    _save_versions(cfg, tiny_tok, range(1, 4))
    kept = load_file(f"{ckpt.run_folder(cfg)}/v000002/model.safetensors")
    assert {t.dtype for t in kept.values()} == {torch.float32}
