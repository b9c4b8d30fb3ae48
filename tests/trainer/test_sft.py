"""SFT through the real trainer loop on tiny-qwen3: supervised steps make the demonstrations likelier,
each step is a checkpoint the engine hot-reloads, a resumed run trains exactly what an uninterrupted
one does, and a warm start hands the SFT'd policy to the RL steps that follow in the same run.

Demonstrations are written into a real store (SQLite) as the proxy records them
(`test_demonstrations.write_run`); the RL rollouts come from the toy source on a real torch engine."""

import numpy as np
import pytest
import torch

from clawgym.policies import load_model
from clawgym.records import Call, RolloutSpec
from clawgym.rl import merge_terms, pack
from clawgym.rl.sft import rescaled, sft_terms, tree_nll
from clawgym.store.sql import SqlStore
from clawgym.trainer.demonstrations import Demonstrations, select, store_groups
from clawgym.trainer.loop import Trainer
from clawgym.trainer.toy import ToyRolloutSource
from clawgym.trainer.update import Normaliser
from tests.trainer.test_demonstrations import write_run


@pytest.fixture
def demos_store(sqlite_url: str):
    store = SqlStore(sqlite_url)
    run_id, _ = write_run(store)
    yield store, run_id
    store.close()


def mean_nll(lm: torch.nn.Module, demos: Demonstrations) -> float:
    """The mean NLL per demonstrated token of every demonstration, under `lm`."""
    norm = Normaliser.of(demos.trees)
    total = 0.0
    with torch.no_grad():
        for tree in demos.trees:
            terms = rescaled(sft_terms(tree.flat), norm.scale(tree, "token"))
            for pk in pack(tree.flat, None, merge_terms(terms)):
                total += tree_nll(lm, pk)[0].item()
    return total


def sft_trainer(cfg, store, demos, tiny_tok, runner, engines, **options) -> Trainer:
    """A trainer on `demos`; RL steps (a warm start's) roll out toy tasks on the first of `engines`."""
    source = ToyRolloutSource(store, engines[0] if engines else None, tiny_tok, runner)
    return Trainer(cfg, store=store, bus=store.bus, source=source, tokenizer=tiny_tok, engines=engines,
                   runner=runner, demonstrations=demos, **options)  # fmt: skip


def test_sft_steps_make_the_demonstrations_likelier_and_the_engine_serves_each_step(
    demos_store, trainer_cfg, tiny_tok, runner, engine
):
    store, run_id = demos_store
    cfg = trainer_cfg(
        steps=4, algorithm={"name": "sft", "lr": 1e-3}, sft={"run_id": run_id, "min_reward": 1.0}
    )
    demos = Demonstrations.of(select(store_groups(store, run_id), 1.0), 2, seed=0)
    before = mean_nll(load_model("tiny-qwen3"), demos)
    trainer = sft_trainer(cfg, store, demos, tiny_tok, runner, [engine])
    try:
        trainer.run()
        after = mean_nll(trainer.policy.module.lm, demos)
    finally:
        trainer.close()
    assert after < 0.5 * before, (
        f"4 SFT steps should halve the demonstrations' NLL: {before:.3f} -> {after:.3f}"
    )
    steps = store.list_train_steps(trainer.run_id)
    assert [s.step for s in steps] == [1, 2, 3, 4] and all(s.metrics["stage"] == "sft" for s in steps)
    losses = [s.metrics["loss"] for s in steps]
    assert losses[0] == pytest.approx(before, rel=1e-4), "a step's loss is the mean NLL before its update"
    assert losses[-1] < losses[0], f"the recorded loss falls: {losses}"
    assert all(s.metrics["sft_tokens"] == demos.tokens and s.metrics["grad_norm"] > 0 for s in steps)
    assert [c.version for c in store.list_checkpoints(trainer.run_id)] == [1, 2, 3, 4]
    assert runner.run(engine.status()).policy_version == 4, "the engine serves the last SFT checkpoint"
    assert store.list_groups(trainer.run_id) == [], "SFT steps roll nothing out"


def test_a_resumed_sft_run_trains_what_an_uninterrupted_one_does(demos_store, trainer_cfg, tiny_tok, runner):
    """Batches are a function of (seed, version) and the optimizer state is checkpointed: two steps,
    a new trainer, two more give the weights of four steps in one go."""
    store, run_id = demos_store
    demos = Demonstrations.of(select(store_groups(store, run_id)), 1, seed=0)

    def run(name: str, *chunks: int) -> tuple[dict[str, torch.Tensor], Trainer]:
        cfg = trainer_cfg(
            run_name=name, steps=4, algorithm={"name": "sft", "lr": 1e-3}, sft={"run_id": run_id}
        )
        for steps in chunks:
            trainer = sft_trainer(cfg, store, demos, tiny_tok, runner, [])
            try:
                trainer.run(steps=steps)
                weights = {k: v.detach().clone() for k, v in trainer.policy.module.lm.state_dict().items()}
            finally:
                trainer.close()
        return weights, trainer

    whole, _ = run("whole", 4)
    resumed, t_resumed = run("resumed", 2, 2)
    assert t_resumed.version == 4
    worst = max((whole[k] - resumed[k]).abs().max().item() for k in whole)
    assert worst < 1e-6, f"the resumed run's weights differ from the uninterrupted run's by {worst}"
    epochs = [s.metrics["sft_epoch"] for s in store.list_train_steps(t_resumed.run_id)]
    assert epochs == [0.5, 1.0, 1.5, 2.0], f"one group a step over two groups, continued: {epochs}"


def test_a_warm_start_trains_sft_steps_then_rl_on_rollouts_of_the_sftd_policy(
    demos_store, trainer_cfg, tiny_tok, runner, engine
):
    store, run_id = demos_store
    cfg = trainer_cfg(steps=3, algorithm={"lr": 1e-3}, sft={"run_id": run_id, "steps": 2, "lr": 5e-3})
    demos = Demonstrations.of(select(store_groups(store, run_id)), 2, seed=0)
    trainer = sft_trainer(cfg, store, demos, tiny_tok, runner, [engine])
    try:
        trainer.run()
    finally:
        trainer.close()
    steps = store.list_train_steps(trainer.run_id)
    assert [s.metrics.get("stage") for s in steps] == ["sft", "sft", None], "2 SFT steps, then RL"
    assert [s.metrics["lr"] for s in steps] == pytest.approx([5e-3, 5e-3, 1e-3]), "sft.lr, then the RL lr"
    assert "reward" in steps[2].metrics and steps[2].metrics["rollouts"] == 6, "the RL step trained rollouts"
    groups = store.list_groups(trainer.run_id)
    versions = {c.policy_version for g in groups for r in store.get_group(g.id).rollouts for c in r.calls}
    assert versions == {2}, f"the RL rollouts were generated by the warm-started policy (v2): {versions}"
    assert [c.version for c in store.list_checkpoints(trainer.run_id)] == [1, 2, 3]
    assert np.isfinite(steps[2].metrics["loss"])


SYSTEM = list(range(100, 160))  # a harness prompt every demonstration shares


def shared_prompt_run(store: SqlStore, n_groups: int) -> str:
    """`n_groups` groups of two passed rollouts each, every prompt the shared SYSTEM then its task."""
    run = store.create_run("shared-demos", {"kind": "test"})
    for g in range(n_groups):
        specs = [RolloutSpec(f"g{g}-{run.id[:8]}", f"task-{g}", "mini-swe-agent")] * 2
        for i, reg in enumerate(store.register_rollouts(run.id, specs)):
            store.start_rollout(reg.rollout_id)
            output = [200 + 10 * g + i, 201 + 10 * g + i, 202]
            store.record_call(Call(
                rollout_id=reg.rollout_id, seq=0, protocol="openai_chat", request={}, response={},
                prompt_ids=np.asarray([*SYSTEM, 300 + g], np.int32), output_ids=np.asarray(output, np.int32),
                output_logprobs=np.full(3, -1.0, np.float32), output_versions=np.zeros(3, np.int32),
                policy_version=0, finish_reason="stop", temperature=1.0,
            ))  # fmt: skip
            store.finish_rollout(reg.rollout_id, "finished", reward=1.0, passed=True)
    return run.id


def nll_and_grad(lm: torch.nn.Module, trees) -> tuple[float, torch.Tensor]:
    """The batch's SFT loss (token aggregation, as one step normalises it) and its gradient."""
    lm.zero_grad()
    norm = Normaliser.of(trees)
    total = 0.0
    for tree in trees:
        terms = rescaled(sft_terms(tree.flat), norm.scale(tree, "token"))
        for pk in pack(tree.flat, None, merge_terms(terms)):
            loss = tree_nll(lm, pk)[0]
            loss.backward()
            total += loss.item()
    return total, torch.cat([p.grad.flatten() for p in lm.parameters() if p.grad is not None])


def test_a_step_merges_its_demonstrations_into_one_tree_per_rank_with_the_same_loss_and_gradient(sqlite_url):
    store = SqlStore(sqlite_url)
    try:
        run_id = shared_prompt_run(store, 4)
        demos = Demonstrations.of(select(store_groups(store, run_id), 1.0), 4, seed=0)
    finally:
        store.close()
    per_rank, n_groups, epoch = demos.step_trees(0)
    separate, _ = demos.batch(0)
    assert (n_groups, epoch, [len(t) for t in per_rank]) == (4, 1.0, [1]), "4 groups, one merged tree"
    merged = per_rank[0][0]
    assert merged.flat.n_positions == len(SYSTEM) + 4 * (1 + 2 * 3), "the shared prompt is held once"
    assert sum(t.flat.n_positions for t in separate) == 4 * (len(SYSTEM) + 1 + 2 * 3)
    assert sorted(merged.group_id.split("+")) == sorted(t.group_id for t in separate)
    lm = load_model("tiny-qwen3")
    loss_merged, grad_merged = nll_and_grad(lm, [merged])
    loss_separate, grad_separate = nll_and_grad(lm, separate)
    assert loss_merged == pytest.approx(loss_separate, rel=1e-5), "the same mean NLL per demonstrated token"
    assert torch.allclose(grad_merged, grad_separate, rtol=1e-4, atol=1e-6), "and the same gradient"

    two, _, _ = demos.step_trees(0, ranks=2)
    assert [len(t) for t in two] == [1, 1] and sum(t[0].n_generated for t in two) == merged.n_generated, (
        "two ranks: each merges its half"
    )


def test_a_group_drawn_twice_in_one_step_weighs_twice(sqlite_url):
    """Across an epoch's end a step can draw a group again: the repeat is a second tree of its rank."""
    store = SqlStore(sqlite_url)
    try:
        groups = select(store_groups(store, shared_prompt_run(store, 3)), 1.0)
    finally:
        store.close()
    for seed in range(100):  # a seed whose epoch 0 ends with the group epoch 1 starts with
        demos = Demonstrations.of(groups, 2, seed=seed)
        picked, _ = demos.batch(1)
        if picked[0].group_id == picked[1].group_id:
            break
    else:
        raise AssertionError("no seed below 100 repeats a group across the first epoch's end")
    per_rank, n_groups, _ = demos.step_trees(1)
    assert n_groups == 2 and [t.group_id for t in per_rank[0]] == [picked[0].group_id] * 2, per_rank
    assert Normaliser.of(per_rank[0]).generated == 2 * picked[0].n_generated, "counted twice, as unmerged"


def test_sft_steps_compute_on_their_own_thread_count_and_give_it_back(
    demos_store, trainer_cfg, tiny_tok, runner, engine
):
    """An embedded async run gives its engine and trainer a share of the cores each; in SFT steps no
    rollout runs, so the trainer computes on `sft_threads` and then returns to its share."""
    store, run_id = demos_store
    cfg = trainer_cfg(
        steps=2, algorithm={"name": "sft", "lr": 1e-3}, sft={"run_id": run_id, "min_reward": 1.0}
    )
    demos = Demonstrations.of(select(store_groups(store, run_id), 1.0), 2, seed=0)
    trainer = sft_trainer(cfg, store, demos, tiny_tok, runner, [engine], sft_threads=3)
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        trainer.run()
        assert torch.get_num_threads() == 1, "the trainer's thread is back on its share"
    finally:
        torch.set_num_threads(before)
        trainer.close()
    assert [s.metrics["torch_threads"] for s in store.list_train_steps(trainer.run_id)] == [3, 3]


def test_torch_threads_sets_only_the_calling_thread_s_count():
    """The engine's loop thread keeps the count it started with while the trainer's thread takes more
    (OpenMP counts are per thread once a thread has computed)."""
    import threading

    from clawgym.trainer.loop import torch_threads

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    seen: list[int] = []
    started, checked = threading.Event(), threading.Event()

    def other() -> None:
        torch.get_num_threads()  # this thread's count is fixed here, as the engine's loop does
        started.set()
        checked.wait(10)
        seen.append(torch.get_num_threads())

    thread = threading.Thread(target=other)
    try:
        thread.start()
        started.wait(10)
        with torch_threads(3):
            assert torch.get_num_threads() == 3
            checked.set()
            thread.join(10)
        assert torch.get_num_threads() == 1
        assert seen == [1], "the other thread kept its own count"
        with torch_threads(0):
            assert torch.get_num_threads() == 1, "0 leaves the count as it is"
    finally:
        checked.set()
        torch.set_num_threads(before)
