"""`inference.weight_sync: cuda_ipc`: the trainer hands an in-process vLLM engine its tensors instead of
the checkpoint folder to read. vLLM does not run on this CPU machine, so the engine here is a stand-in
with VllmEngine's `weight_sync` and `push_weights`, serving through a real torch engine: the trainer
must push each version's weights, exactly as its checkpoint holds them, and never ask for a reload
from files. A configuration where nothing could receive the tensors is refused before the run."""

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from clawgym.assemble import build_trainer
from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore


class PushedEngine:
    """VllmEngine's push interface over a real torch engine: pushed tensors are recorded and served."""

    weight_sync = "cuda_ipc"

    def __init__(self, engine, folder: Path) -> None:
        self.engine, self.folder = engine, folder
        self.pushed: dict[int, dict[str, torch.Tensor]] = {}

    def generate(self, *args, **kwargs):
        return self.engine.generate(*args, **kwargs)

    async def status(self):
        return await self.engine.status()

    async def push_weights(self, version: int, named_tensors: dict[str, torch.Tensor]) -> float:
        self.pushed[version] = {n: t.detach().clone() for n, t in named_tensors.items()}
        folder = self.folder / f"pushed-{version}"
        folder.mkdir()
        save_file(
            {n: t.contiguous() for n, t in self.pushed[version].items()}, str(folder / "model.safetensors")
        )
        self.engine.model.config.save_pretrained(folder)
        return await self.engine.load_weights(version, str(folder))

    async def load_weights(self, version: int, uri: str) -> float:
        raise AssertionError(f"with cuda_ipc the trainer must push, not ask for a reload from {uri}")


@pytest.fixture
def store(sqlite_url: str):
    s = SqlStore(sqlite_url, MemoryBus())
    yield s
    s.close()


def test_the_trainer_pushes_each_versions_weights_as_its_checkpoint_holds_them(
    store, trainer_cfg, make_trainer, engine, runner, tmp_path
):
    pushed = PushedEngine(engine, tmp_path)
    trainer = make_trainer(trainer_cfg(steps=2), store, engines=[pushed])
    trainer.run()
    assert sorted(pushed.pushed) == [1, 2], "every published version is pushed"
    assert runner.run(engine.status()).policy_version == 2, "the engine serves what was pushed"
    saved = load_file(str(Path(trainer.cfg.checkpoint_uri) / "test-run" / "v000002" / "model.safetensors"))
    assert set(pushed.pushed[2]) == set(saved), (
        "the pushed names are the checkpoint's (HF names, tied head left out)"
    )
    for name, tensor in saved.items():
        torch.testing.assert_close(pushed.pushed[2][name], tensor, rtol=0, atol=0, msg=name)
    assert any(not torch.equal(pushed.pushed[1][n], pushed.pushed[2][n]) for n in saved), (
        "test setup: the two versions' weights must differ"
    )


def test_cuda_ipc_without_an_engine_in_the_trainers_process_is_refused(tmp_path, sqlite_url, engine):
    cfg = ClawgymConfig(
        store={"url": sqlite_url},
        inference={"weight_sync": "cuda_ipc"},
        trainer={"model": "tiny-qwen3", "rollout_source": "toy", "checkpoint_uri": str(tmp_path)},
    )
    with pytest.raises(FailedPrecondition, match="weight_sync files"):
        build_trainer(cfg, engines=[engine])  # the torch engine reloads from files only
