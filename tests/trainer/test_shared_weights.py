"""`inference.weight_sync: shared`: the trainer lends its own parameters to the torch engine in its process.

Over an async run (rollouts generated while the trainer updates), the engine ends up computing with the
trainer's tensors (no second copy) at the last committed version, and every call served by one version
has the logprobs that version's checkpoint gives: the engine computed nothing while the optimizer
changed the weights, and served a version only once it was committed. With `copy` the engine keeps its own
tensors in its own dtype, each version copied in at its commit. A configuration where the engine cannot
borrow the trainer's tensors is refused before the run.
"""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from clawgym.assemble import build_trainer
from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.inference.torch_engine import TorchEngine
from clawgym.policies import load_model
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore
from clawgym.trainer import checkpoint as ckpt
from clawgym.trainer.loop import Trainer
from clawgym.trainer.toy import ToyRolloutSource


@pytest.fixture
def store(sqlite_url: str):
    s = SqlStore(sqlite_url, MemoryBus())
    yield s
    s.close()


def recomputed_logprobs(model: torch.nn.Module, prompt, output, temperature: float) -> torch.Tensor:
    """Each output token's logprob under `model` at the call's temperature (0: greedy, scored at 1)."""
    ids = torch.tensor([list(prompt) + list(output)])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float() / (temperature or 1.0)
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(output).long()[:, None])[:, 0]


def one_version_calls(store, run_id: str):
    """(version, call) of each call that one version served: tokens after a swap attend to keys and
    values of the old weights (as in vLLM), so a call spanning two matches neither."""
    for rollout in store.list_rollouts(run_id):
        for call in store.list_calls(rollout.id):
            versions = set(call.output_versions.tolist())
            if len(versions) == 1:
                yield versions.pop(), call


def run_four_async_steps(engine: TorchEngine, store, trainer_cfg, tiny_tok, runner, **overrides):
    """Four async steps whose rollouts `engine` serves: (the trainer's served weights at the end, the
    engine's status, the run's id, its checkpoints' folder)."""
    cfg = trainer_cfg(steps=4, mode="async", keep_checkpoints=4, **overrides)
    trainer = Trainer(
        cfg,
        store=store,
        bus=store.bus,
        source=ToyRolloutSource(store, engine, tiny_tok, runner),
        tokenizer=tiny_tok,
        engines=[engine],
        runner=runner,
    )
    try:
        trainer.run()
        served = ckpt.serving_weights(trainer.policy)
        status = runner.run(engine.status())
    finally:
        trainer.close()
        runner.run(engine.aclose())
    return served, status, trainer.run_id, Path(cfg.checkpoint_uri) / "test-run"


def test_a_shared_engine_serves_each_committed_version_with_the_trainers_own_tensors(
    store, trainer_cfg, tiny_tok, runner
):
    engine = TorchEngine(load_model("tiny-qwen3"), name="tiny-qwen3", weight_sync="shared")
    served, status, run_id, folders = run_four_async_steps(engine, store, trainer_cfg, tiny_tok, runner)
    assert all(engine._targets[name].data_ptr() == t.data_ptr() for name, t in served.items()), (
        "the engine must compute with the trainer's own tensors"
    )
    assert status.policy_version == 4 and status.extra["reloads"] == 5, status  # v0 lent at start, then 1-4
    models = {0: load_model("tiny-qwen3")} | {v: load_model(str(folders / f"v{v:06d}")) for v in (1, 2, 3, 4)}
    seen: set[int] = set()
    worst = 0.0
    for version, call in one_version_calls(store, run_id):
        expected = recomputed_logprobs(models[version], call.prompt_ids, call.output_ids, call.temperature)
        worst = max(worst, (expected - torch.from_numpy(call.output_logprobs)).abs().max().item())
        seen.add(version)
    assert len(seen) >= 2, f"test setup: calls of several versions must be recorded, saw {sorted(seen)}"
    assert worst < 1e-3, f"a token's logprob is not its recorded version's (off by {worst:.4f})"
    changed = max((models[1].state_dict()[n] - models[2].state_dict()[n]).abs().max().item() for n in served)
    assert changed > 1e-4, "test setup: the versions' weights must differ"


def test_a_copying_engine_serves_each_committed_version_in_its_own_dtype(
    store, trainer_cfg, tiny_tok, runner
):
    """`weight_sync: copy`: float32 training, bfloat16 serving, no checkpoint read: each version's calls
    have the logprobs of that checkpoint's weights in bfloat16, and the engine's tensors stay its own
    (the same memory throughout)."""
    engine = TorchEngine(
        load_model("tiny-qwen3", dtype=torch.bfloat16), name="tiny-qwen3", weight_sync="copy"
    )
    own = {name: t.data_ptr() for name, t in engine._targets.items()}
    served, status, run_id, folders = run_four_async_steps(engine, store, trainer_cfg, tiny_tok, runner)
    assert all(t.dtype == torch.bfloat16 for t in engine._targets.values())
    assert {name: t.data_ptr() for name, t in engine._targets.items()} == own, (
        "each version is copied into the engine's own tensors, not a second set"
    )
    assert all(torch.equal(engine._targets[n], t.to(torch.bfloat16)) for n, t in served.items()), (
        "the engine ends on the trainer's last weights, in bfloat16"
    )
    assert status.policy_version == 4 and status.extra["reloads"] == 5, status  # v0 pushed at start, then 1-4
    models = {v: load_model(str(folders / f"v{v:06d}"), dtype=torch.bfloat16) for v in (1, 2, 3, 4)}
    models[0] = load_model("tiny-qwen3", dtype=torch.bfloat16)
    seen: set[int] = set()
    worst = 0.0
    for version, call in one_version_calls(store, run_id):
        recorded = torch.from_numpy(call.output_logprobs)
        off = {
            v: (recomputed_logprobs(m, call.prompt_ids, call.output_ids, call.temperature) - recorded)
            .abs()
            .max()
            .item()
            for v, m in models.items()
        }
        assert min(off, key=off.get) == version, f"a call of v{version} has the logprobs of another: {off}"
        worst = max(worst, off[version])
        seen.add(version)
    assert len(seen) >= 2, f"test setup: calls of several versions must be recorded, saw {sorted(seen)}"
    # bfloat16 forwards of other batch shapes round otherwise: bfloat16's tolerance (versions differ by >0.3)
    assert worst < 0.02, f"a token's logprob is not its recorded version's in bfloat16 (off by {worst:.4f})"


def test_a_copying_engine_serves_a_lora_policy_with_its_adapters_merged(
    store, trainer_cfg, tiny_tok, runner, monkeypatch
):
    """Each version's adapters are merged once, for its checkpoint and the engine's copy alike."""
    merges: list[int] = []
    merge = ckpt.merge_lora_state
    monkeypatch.setattr(ckpt, "merge_lora_state", lambda *a: merges.append(1) or merge(*a))
    engine = TorchEngine(load_model("tiny-qwen3"), name="tiny-qwen3", weight_sync="copy")
    base = {name: t.clone() for name, t in engine._targets.items()}
    served, status, _, folders = run_four_async_steps(
        engine, store, trainer_cfg, tiny_tok, runner, lora={"enabled": True, "r": 4, "alpha": 8}
    )
    assert status.policy_version == 4, status
    assert all(torch.equal(engine._targets[n], t) for n, t in served.items()), "the merged weights, copied"
    moved = [n for n in served if not torch.equal(served[n], base[n])]
    assert moved, "test setup: the adapters must have moved the merged weights"
    saved = load_file(str(folders / "v000004" / "model.safetensors"))
    assert all(torch.equal(saved[n], served[n]) for n in saved), "the checkpoint holds the weights served"
    # v0 pushed at start, then one merge per version (the test's own `served` above is the sixth)
    assert len(merges) == 6, f"{len(merges)} merges for 4 versions"


@pytest.mark.parametrize("sync", ["shared", "copy"])
def test_in_process_weights_without_an_engine_that_takes_them_are_refused(tmp_path, sqlite_url, engine, sync):
    cfg = ClawgymConfig(
        store={"url": sqlite_url},
        inference={"weight_sync": sync, "model": "tiny-qwen3"},
        trainer={"model": "tiny-qwen3", "rollout_source": "toy", "checkpoint_uri": str(tmp_path)},
    )
    with pytest.raises(FailedPrecondition, match=f"weight_sync={sync} .*weight_sync files"):
        build_trainer(cfg, engines=[engine])  # an engine that reloads from files only
