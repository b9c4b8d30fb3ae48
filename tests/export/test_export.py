"""`clawgym export`: a captured run written as JSONL, Parquet and a Hugging Face dataset folder, read back
and compared with what the store holds (both backends), and the CLI on a run folder; a training run's
rows carry the step that consumed their group, the advantage the trainer's own code computes for
them, and the tokens decoded by the run's tokenizer."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clawgym.errors import InvalidArgument
from clawgym.export import FORMATS, export_run, read_export
from clawgym.policies import load_tokenizer
from clawgym.records import Checkpoint
from clawgym.rl.terms import grpo_terms
from clawgym.store.sql import SqlStore
from clawgym.trainer.batch import build_batch
from clawgym.trainer.config import TrainerConfig
from clawgym.trajectory.view import rollout_view
from tests.export.capture import HOSTILE, CapturedRun, capture_run

CLAWGYM = str(Path(sys.executable).with_name("clawgym"))  # the installed console script


@pytest.fixture
def captured(store_url: str) -> Iterator[tuple[SqlStore, CapturedRun]]:
    store = SqlStore(store_url)
    yield store, capture_run(store)
    store.close()


def check_against_store(store: SqlStore, run: CapturedRun, tables: dict[str, list[dict]]) -> None:
    """Every call and tree node of the run comes back with the store's exact values, in order."""
    calls = [(r, c) for r in run.rollout_ids for c in store.list_calls(r)]
    assert len(tables["calls"]) == len(calls) == 4, "one row per captured call"
    for row, (rollout_id, call) in zip(tables["calls"], calls, strict=True):
        rollout = store.get_rollout(rollout_id)
        where = f"call {call.seq} of {rollout_id}"
        assert (row["rollout_id"], row["seq"], row["call_id"]) == (rollout_id, call.seq, call.id), where
        assert (row["run_id"], row["group_id"]) == (run.run_id, run.group_id), where
        assert (row["reward"], row["passed"], row["rollout_status"]) == (rollout.reward, rollout.passed, "finished")
        assert row["prompt_ids"] == call.prompt_ids.tolist() and row["output_ids"] == call.output_ids.tolist()
        assert np.array_equal(np.array(row["output_logprobs"], np.float32), call.output_logprobs), (
            f"{where}: logprobs must survive bit for bit"
        )
        assert row["output_versions"] == call.output_versions.tolist(), where
        assert (row["policy_version"], row["temperature"]) == (call.policy_version, call.temperature), where
        assert json.loads(row["request_json"]) == call.request, f"{where}: the raw request comes back"
        assert json.loads(row["response_json"]) == call.response, where
        assert row["finish_reason"] == call.finish_reason and row["latency_s"] == call.latency_s
        assert (row["step"], row["advantage"], row["prompt_text"]) == (None, None, None), (
            f"{where}: a run no step trained, exported without a tokenizer"
        )
    want_nodes = []
    for rollout_id in run.rollout_ids:
        view = rollout_view(store.list_calls(rollout_id), store.get_rollout(rollout_id))
        want_nodes += [(rollout_id, n) for n in view["nodes"]]
    assert len(tables["trees"]) == len(want_nodes) == 5, "2 nodes (one line) + 3 (a branch)"
    for row, (rollout_id, node) in zip(tables["trees"], want_nodes, strict=True):
        assert (row["rollout_id"], row["node"], row["parent"]) == (rollout_id, node["id"], node["parent"])
        for column in ("depth", "token_ids", "generated", "gen_call", "versions", "temperatures", "calls", "ends"):
            assert row[column] == node[column], f"trees.{column} of node {node['id']} of {rollout_id}"
        assert row["logprobs"] == pytest.approx(node["logprobs"], nan_ok=False, abs=0), "engine logprobs"


@pytest.mark.parametrize("fmt", FORMATS)
def test_each_format_reads_back_exactly_what_the_store_holds(captured, tmp_path: Path, fmt: str) -> None:
    store, run = captured
    manifest = export_run(store, run.run_id, fmt, tmp_path / "out")
    assert manifest["rows"] == {"calls": 4, "trees": 5} and manifest["run"]["id"] == run.run_id
    check_against_store(store, run, read_export(tmp_path / "out"))
    if fmt == "hf":
        import datasets

        calls = datasets.load_from_disk(str(tmp_path / "out" / "calls"))
        assert calls.features["prompt_ids"].feature.dtype == "int32", "token ids are int32 in the dataset"
        assert calls.features["output_logprobs"].feature.dtype == "float32"


def test_export_refuses_a_folder_that_holds_files_and_an_unknown_format(captured, tmp_path: Path) -> None:
    store, run = captured
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept.txt").write_text("mine")
    with pytest.raises(InvalidArgument, match="not an empty folder"):
        export_run(store, run.run_id, "jsonl", tmp_path / "full")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["kept.txt"], "nothing was written beside it"
    with pytest.raises(InvalidArgument, match="unknown export format"):
        export_run(store, run.run_id, "csv", tmp_path / "new")


def test_clawgym_export_writes_a_run_folder_as_parquet(tmp_path: Path) -> None:
    """The real CLI on a run folder (runs/<ts>/clawgym.db), its newest training run by default (not
    the evaluation runs a run folder also holds, even when newer)."""
    run_dir = tmp_path / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    store = SqlStore(f"sqlite:///{run_dir / 'clawgym.db'}")
    run = capture_run(store)
    store.create_run("quickstart-eval-1", {"kind": "eval"})
    out = tmp_path / "export"
    done = subprocess.run(
        [CLAWGYM, "export", "--run-dir", str(run_dir), "--format", "parquet",
         "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"run {run.run_id}: 4 calls, 5 tree nodes" in done.stdout, done.stdout
    tables = read_export(out)
    check_against_store(store, run, tables)
    request = json.loads(tables["calls"][0]["request_json"])
    assert HOSTILE in request["messages"][0]["content"], "the raw request is kept as sent, markup included"
    store.close()
    bad = subprocess.run(
        [CLAWGYM, "export", "--run-dir", str(tmp_path), "--out", str(tmp_path / "x")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "not a run folder" in bad.stderr, (bad.returncode, bad.stderr)


def trained_run(store: SqlStore, tmp_path: Path, **algorithm) -> CapturedRun:
    """The captured run as a training run (the trainer's config), its group consumed and trained by step
    1 (checkpoint v1, the step's trained_groups), as the trainer records them."""
    config = TrainerConfig(model="tiny-qwen3", algorithm=algorithm).model_dump(mode="json")
    run = capture_run(store, run_config=config)
    store.record_checkpoint(Checkpoint(run.run_id, 1, 1, str(tmp_path / "v1"), {}, group_ids=(run.group_id,)))
    store.record_train_step(run.run_id, 1, {"loss": 0.1, "version": 1, "trained_groups": [run.group_id]})
    return run


def trainer_advantages(store: SqlStore, run: CapturedRun, **algorithm) -> dict[str, float]:
    """Each rollout's advantage as the trainer computes it in its step: its tree's GRPO terms."""
    (tree,) = build_batch([store.get_group(run.group_id)], version=0, max_policy_lag=4).trees
    terms = grpo_terms(tree.flat, **algorithm)
    by_rollout = {int(terms.path_rollout[p]): float(a) for p, a in zip(terms.path, terms.adv, strict=True)}
    return {rollout_id: by_rollout[i] for i, rollout_id in enumerate(run.rollout_ids)}


@pytest.mark.parametrize("algorithm", [{}, {"scale_by_std": False, "leave_one_out": True}], ids=["grpo", "rloo"])
def test_a_trained_groups_rows_carry_their_step_and_the_advantage_the_trainer_computed(
    store_url: str, tmp_path: Path, algorithm: dict
) -> None:
    """The store keeps no advantages: the export recomputes them from the group's rewards with the
    run's algorithm settings, and must get what the trainer's own tree terms give each rollout."""
    store = SqlStore(store_url)
    try:
        run = trained_run(store, tmp_path, **algorithm)
        manifest = export_run(store, run.run_id, "parquet", tmp_path / "out")
        want = trainer_advantages(store, run, **algorithm)
    finally:
        store.close()
    assert sorted(want.values()) != [0.0, 0.0], f"rewards 1 and 0 give the two rollouts opposite advantages: {want}"
    tables = read_export(tmp_path / "out")
    for table in ("calls", "trees"):
        got = [(r["rollout_id"], r["step"], r["advantage"]) for r in tables[table]]
        assert {rid for rid, _, _ in got} == set(want), f"{table}: rows of both rollouts"
        for rid, step, advantage in got:
            assert (step, advantage) == (1, pytest.approx(want[rid], abs=1e-9)), f"{table}: {got} vs {want}"
    assert manifest["notes"]["advantage"].startswith("grpo, recomputed"), manifest["notes"]
    assert manifest["notes"]["text"] == "null: no tokenizer", "export_run decodes only with a tokenizer given"


def test_a_ppo_runs_rows_have_a_step_and_no_advantage(store_url: str, tmp_path: Path) -> None:
    """PPO's advantages are per token, from the value head at that step: nothing to recompute them from."""
    store = SqlStore(store_url)
    try:
        run = trained_run(store, tmp_path, name="ppo")
        manifest = export_run(store, run.run_id, "jsonl", tmp_path / "out")
    finally:
        store.close()
    rows = read_export(tmp_path / "out")["calls"]
    assert {(r["step"], r["advantage"]) for r in rows} == {(1, None)}, rows[0]
    assert "per token" in manifest["notes"]["advantage"], manifest["notes"]


def test_clawgym_export_decodes_the_tokens_with_the_runs_tokenizer(tmp_path: Path) -> None:
    """The real CLI on a run folder holding a training run: the text columns are its model's tokenizer
    decoding the exported ids (no --model needed); a --model that cannot load is refused."""
    run_dir = tmp_path / "runs" / "20260101-000000"
    run_dir.mkdir(parents=True)
    store = SqlStore(f"sqlite:///{run_dir / 'clawgym.db'}")
    run = trained_run(store, tmp_path)
    store.close()
    out = tmp_path / "export"
    done = subprocess.run([CLAWGYM, "export", str(run_dir), "--out", str(out)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0 and f"run {run.run_id}: 4 calls" in done.stdout, done.stderr
    tok = load_tokenizer("tiny-qwen3")
    tables = read_export(out)
    for row in tables["calls"]:
        assert row["prompt_text"] == tok.decode(row["prompt_ids"]) and row["output_text"] == tok.decode(row["output_ids"])
    assert HOSTILE in tables["calls"][0]["prompt_text"], "the decoded prompt holds the user's message as sent"
    assert all(row["text"] == tok.decode(row["token_ids"]) for row in tables["trees"]), "each node's tokens decoded"
    manifest = json.loads((out / "run.json").read_text())
    assert manifest["notes"]["text"] == "decoded by the tokenizer of tiny-qwen3", manifest["notes"]
    bad = subprocess.run(
        [CLAWGYM, "export", str(run_dir), "--out", str(tmp_path / "x"), "--model", "no-such-model"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "cannot load the tokenizer of --model 'no-such-model'" in bad.stderr, bad.stderr
