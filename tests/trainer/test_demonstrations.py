"""Demonstrations for SFT: the filters keep exactly the rollouts and calls they name, and a store run,
its export folder (JSONL, Parquet, HF) and its run folder give the same trees, batches and packs.

The data is written into a real store (PostgreSQL and SQLite) as the proxy records it, with small
meaningful ids: prompts 1-8, outputs 10s-80s by rollout, 9 the turn header between calls."""

from pathlib import Path

import numpy as np
import pytest
import yaml

from clawgym.assemble import open_demonstrations
from clawgym.config import ClawgymConfig
from clawgym.errors import FailedPrecondition
from clawgym.export import FORMATS, export_run
from clawgym.records import Call, RolloutSpec
from clawgym.store.sql import SqlStore
from clawgym.trainer.config import AlgorithmConfig
from clawgym.trainer.demonstrations import Demonstrations, is_teacher, select, store_groups
from clawgym.trainer.sft import sft_packs
from clawgym.trainer.update import Normaliser

TEACHER = {"_clawgym": {"proxy": "p0", "teacher": "big-model"}}
STUDENT = {"_clawgym": {"proxy": "p0"}}
A, B = [1, 2, 3, 4, 5], [6, 7, 8]
# rollout name -> (group, status, reward, calls as (prompt, output, response))
ROLLOUTS = {
    "r0": ("A", "finished", 1.0, [(A, [10, 11, 12], STUDENT)]),
    "r1": ("A", "finished", 0.0, [(A, [20, 21], STUDENT)]),
    "r2": ("A", "cancelled", None, [(A, [30], STUDENT)]),  # ended without a reward
    "r3": ("A", "failed", None, [(A, [40], STUDENT)]),  # an infrastructure failure: never trained
    "r4": ("B", "finished", 1.0, [
        (B, [50, 51], STUDENT),
        ([*B, 50, 51, 9], [60, 61], TEACHER),  # the teacher answers with the student's turn as history
        ([*B, 50, 51, 9, 60, 61, 9], [70], STUDENT),
    ]),
    "r5": ("B", "finished", 0.5, [(B, [80], TEACHER)]),
}  # fmt: skip


def write_run(store: SqlStore) -> tuple[str, dict[str, str]]:
    """The rollouts above recorded in a new run of `store`; (run id, rollout name -> id)."""
    run = store.create_run("demos", {"kind": "test"})
    ids = {}
    for group in ("A", "B"):
        names = [n for n, r in ROLLOUTS.items() if r[0] == group]
        specs = [RolloutSpec(f"{group}-{run.id[:8]}", f"task-{group}", "reference")] * len(names)
        for name, reg in zip(names, store.register_rollouts(run.id, specs), strict=True):
            ids[name] = reg.rollout_id
            store.start_rollout(reg.rollout_id)
            _, status, reward, calls = ROLLOUTS[name]
            for seq, (prompt, output, response) in enumerate(calls):
                store.record_call(
                    Call(
                        rollout_id=reg.rollout_id, seq=seq, protocol="openai_chat", request={}, response=response,
                        prompt_ids=np.asarray(prompt, np.int32), output_ids=np.asarray(output, np.int32),
                        output_logprobs=np.full(len(output), -1.5, np.float32),
                        output_versions=np.zeros(len(output), np.int32), policy_version=0, finish_reason="stop",
                        temperature=0.7,
                    )
                )  # fmt: skip
            store.finish_rollout(reg.rollout_id, status, reward=reward, passed=reward == 1.0)
    return run.id, ids


@pytest.fixture
def recorded(store_url: str):
    store = SqlStore(store_url)
    run_id, ids = write_run(store)
    yield store, run_id, ids
    store.close()


def kept(groups, ids: dict[str, str]) -> dict[str, list[int]]:
    """rollout name -> the seqs of its kept calls."""
    name = {v: k for k, v in ids.items()}
    return {name[r.rollout.id]: [c.seq for c in r.calls] for g in groups for r in g.rollouts}


@pytest.mark.parametrize(
    ("min_reward", "teacher_only", "expected"),
    [
        (None, False, {"r0": [0], "r1": [0], "r2": [0], "r4": [0, 1, 2], "r5": [0]}),
        (1.0, False, {"r0": [0], "r4": [0, 1, 2]}),
        (0.5, False, {"r0": [0], "r4": [0, 1, 2], "r5": [0]}),
        (None, True, {"r4": [1], "r5": [0]}),
        (1.0, True, {"r4": [1]}),
    ],
)
def test_filters_keep_exactly_the_rollouts_and_calls_they_name(recorded, min_reward, teacher_only, expected):
    """min_reward keeps rollouts rewarded at least that much (an unrewarded one never), teacher_only the
    calls the proxy marked as a teacher's; a failed rollout (infrastructure) is never a demonstration."""
    store, run_id, ids = recorded
    groups = select(store_groups(store, run_id), min_reward, teacher_only)
    assert kept(groups, ids) == expected, f"min_reward={min_reward} teacher_only={teacher_only}"
    assert all(g.rollouts for g in groups), "a group left without demonstrations is dropped"


def test_a_harness_filter_keeps_the_rollouts_through_those_harnesses(recorded):
    store, run_id, ids = recorded
    (reg,) = store.register_rollouts(run_id, [RolloutSpec(f"C-{run_id[:8]}", "task-C", "mini-swe-agent")])
    store.start_rollout(reg.rollout_id)
    store.record_call(Call(
        rollout_id=reg.rollout_id, seq=0, protocol="openai_chat", request={}, response=TEACHER,
        prompt_ids=np.asarray(A, np.int32), output_ids=np.asarray([90], np.int32),
        output_logprobs=np.full(1, np.nan, np.float32), output_versions=np.zeros(1, np.int32),
        policy_version=0, finish_reason="stop", temperature=0.7,
    ))  # fmt: skip
    store.finish_rollout(reg.rollout_id, "finished", reward=1.0, passed=True)
    groups = store_groups(store, run_id)
    ids = {**ids, "c": reg.rollout_id}
    assert set(kept(select(groups, 1.0, harnesses=["mini-swe-agent"]), ids)) == {"c"}
    assert set(kept(select(groups, 1.0, harnesses=["reference"]), ids)) == {"r0", "r4"}
    assert set(kept(select(groups, 1.0), ids)) == {"r0", "r4", "c"}, "no filter: every harness"


def test_teacher_only_trains_the_teachers_tokens_with_the_students_turn_as_context(recorded):
    store, run_id, ids = recorded
    calls = store.list_calls(ids["r4"])
    assert [is_teacher(c) for c in calls] == [False, True, False], "the marker is read from the record"
    demos = Demonstrations.of(select(store_groups(store, run_id), 1.0, True), 4, seed=0)
    (tree,) = demos.trees
    flat = tree.flat
    assert sorted(flat.tokens[flat.gen_pos].tolist()) == [60, 61], "only the teacher's output is trained"
    assert {50, 51}.issubset(flat.tokens.tolist()), "the student's earlier turn stays, as context"
    assert 70 not in flat.tokens.tolist(), "a student call after the last teacher call is left out"


def test_no_demonstration_left_is_refused(recorded):
    store, run_id, _ = recorded
    with pytest.raises(FailedPrecondition, match="no demonstration"):
        Demonstrations.of(select(store_groups(store, run_id), 2.0), 4, seed=0)


def sft_cfg(**sft) -> ClawgymConfig:
    trainer = {"model": "tiny-qwen3", "algorithm": {"name": "sft"}, "sft": {"groups_per_step": 1, **sft}}
    return ClawgymConfig.model_validate({"trainer": trainer})


def same_demonstrations(a: Demonstrations, b: Demonstrations, what: str) -> None:
    assert len(a.trees) == len(b.trees) == 2, f"{what}: both groups"
    for step in range(4):  # two epochs of one group per step
        ta, _ = a.batch(step)
        tb, _ = b.batch(step)
        assert [t.group_id for t in ta] == [t.group_id for t in tb], (
            f"{what}: step {step} draws the same group"
        )
        for x, y in zip(ta, tb, strict=True):
            for field in ("tokens", "gen_pos", "gen_rollout", "gen_logprob", "gen_version"):
                assert np.array_equal(getattr(x.flat, field), getattr(y.flat, field)), f"{what}: {field}"
            assert np.array_equal(x.flat.parent(), y.flat.parent()), f"{what}: the tree's shape"
        pa = sft_packs(ta, AlgorithmConfig(), Normaliser.of(ta), 64)
        pb = sft_packs(tb, AlgorithmConfig(), Normaliser.of(tb), 64)
        for p, q in zip(pa, pb, strict=True):
            assert p.input_ids.equal(q.input_ids) and p.rows.weight.equal(q.rows.weight), f"{what}: packs"


def test_a_store_run_its_export_folders_and_its_run_folder_give_the_same_batches(
    recorded, store_url, tmp_path
):
    store, run_id, _ = recorded
    filters = {"min_reward": 0.5}
    from_store = open_demonstrations(sft_cfg(run_id=run_id, **filters), store)
    assert sorted(len(t.rewards) for t in from_store.trees) == [1, 2], "r0 in A; r4 and r5 in B"
    for fmt in FORMATS:
        export_run(store, run_id, fmt, tmp_path / fmt)
        from_export = open_demonstrations(sft_cfg(source=str(tmp_path / fmt), **filters), store)
        same_demonstrations(from_store, from_export, f"export {fmt}")
    folder = tmp_path / "run-folder"
    folder.mkdir()
    (folder / "config.yaml").write_text(yaml.safe_dump({"store": {"url": store_url}}))
    from_folder = open_demonstrations(sft_cfg(source=str(folder), run_id=run_id, **filters), store)
    same_demonstrations(from_store, from_folder, "run folder")
    teacher = open_demonstrations(sft_cfg(source=str(tmp_path / "jsonl"), teacher_only=True), store)
    assert sorted(teacher.trees[0].flat.tokens[teacher.trees[0].flat.gen_pos].tolist()) == [60, 61, 80], (
        "the teacher marker survives the export"
    )


def test_epochs_reshuffle_and_a_step_is_a_fixed_function_of_the_seed(recorded):
    store, run_id, _ = recorded
    groups = select(store_groups(store, run_id))
    demos = Demonstrations.of(groups, 1, seed=3)
    order = [demos.batch(k)[0][0].group_id for k in range(8)]
    for epoch in range(4):
        assert sorted(order[2 * epoch : 2 * epoch + 2]) == sorted(t.group_id for t in demos.trees), (
            f"epoch {epoch} takes every group once"
        )
    again = Demonstrations.of(groups, 1, seed=3)
    assert [again.batch(k)[0][0].group_id for k in range(8)] == order, "same seed, same order (resume)"
    assert demos.batch(3)[1] == pytest.approx(2.0), "step 4 of 1-group steps over 2 groups ends epoch 2"


def test_a_source_that_is_no_run_or_export_folder_is_refused(recorded, tmp_path: Path):
    store, _, _ = recorded
    with pytest.raises(Exception, match="neither a run folder nor an export folder"):
        open_demonstrations(sft_cfg(source=str(tmp_path)), store)
