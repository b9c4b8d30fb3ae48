"""Publish: after a step the engine serves the new version, and its logprobs equal the trainer's.

Once in-process (the trainer calls `TorchEngine.load_weights`) and once through the real inference
gRPC service on a loopback port (the trainer holds a `GrpcEngine`). The comparison is at the
tokens the engine sampled, against the trainer's own packed forward of its updated policy.
"""


import numpy as np
import pytest
import torch

from clawgym.inference.grpc_client import GrpcEngine
from clawgym.inference.interface import SamplingParams
from clawgym.policies import load_model
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.sql import SqlStore


def trainer_logprobs(lm, prompt: list[int], output: list[int]) -> np.ndarray:
    """log π(output_k | prompt + output_<k) of the trainer's model, one forward."""
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = lm(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return logp[torch.arange(len(output)), torch.tensor(output)].numpy()


@pytest.mark.parametrize("transport", ["in-process", "grpc"])
def test_a_published_checkpoint_is_served_with_the_trainers_logprobs(
    transport, sqlite_url, trainer_cfg, make_trainer, engine, runner, tiny_tok, serve_inference
):
    """One step → the engine reports version 1, and the logprobs it returns for the tokens it samples
    equal the updated trainer policy's (CPU float tolerance), and differ from version 0's."""
    store = SqlStore(sqlite_url, MemoryBus())
    server = serve_inference(engine) if transport == "grpc" else None
    served = GrpcEngine(f"127.0.0.1:{server.port}", secret=server.secret) if server is not None else engine
    try:
        trainer = make_trainer(trainer_cfg(steps=1, algorithm={"lr": 3e-3}), store, engines=[served])
        trainer.run()
        status = runner.run(served.status())
        assert status.policy_version == 1, (
            f"the {transport} engine must serve the published version: {status}"
        )
        prompt = tiny_tok.apply_chat_template(
            [{"role": "user", "content": "Name three colours."}],
            add_generation_prompt=True,
            return_dict=False,
        )

        async def sample():
            ids, logprobs, versions = [], [], []
            async for chunk in served.generate(prompt, SamplingParams(max_new_tokens=12, seed=3)):
                ids += chunk.token_ids
                logprobs += chunk.logprobs
                versions += chunk.policy_versions
            return ids, np.asarray(logprobs), versions

        ids, engine_lp, versions = runner.run(sample())
        assert versions == [1] * len(ids), f"every token must come from version 1: {versions}"
        trained = trainer_logprobs(trainer.policy.module.lm, prompt, ids)
        np.testing.assert_allclose(
            engine_lp, trained, atol=2e-4, err_msg="engine and trainer disagree on the new policy's logprobs"
        )
        before = trainer_logprobs(load_model("tiny-qwen3"), prompt, ids)
        assert np.abs(before - trained).max() > 1e-3, "test setup: the step must have changed the policy"
    finally:
        if server is not None:
            runner.run(served.aclose())
            server.close()
        store.close()


def test_a_checkpoint_an_engine_refuses_fails_the_run_naming_engine_version_and_folder(
    sqlite_url, trainer_cfg, make_trainer, engine, runner
):
    """A step whose checkpoint an engine refuses ends the run with that error, not a log line: here the
    second engine is a real torch engine serving a 2-layer model, whose own fit check refuses the
    4-layer checkpoint ("does not fit the served model: 22 unknown tensors"). The trainer's state is
    `failed` and the refusing engine keeps serving its weights."""
    from transformers import AutoModelForCausalLM

    from clawgym.errors import FailedPrecondition
    from clawgym.inference.torch_engine import TorchEngine

    config = load_model("tiny-qwen3").config
    config.num_hidden_layers = 2
    other = TorchEngine(AutoModelForCausalLM.from_config(config).eval(), name="two-layers")
    store = SqlStore(sqlite_url, MemoryBus())
    try:
        trainer = make_trainer(trainer_cfg(steps=2), store, engines=[engine, other])
        refused = r"engine 1 did not load checkpoint 1 from .*/v000001: .*does not fit the served model"
        with pytest.raises(FailedPrecondition, match=refused):
            trainer.run()
        assert trainer.version == 1 and trainer.status.state == "failed", (
            f"the run stops at the step whose checkpoint was refused: {trainer.status}"
        )
        assert runner.run(other.status()).policy_version == 0, "the refusing engine kept its weights"
    finally:
        runner.run(other.aclose())
        store.close()
