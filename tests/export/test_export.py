"""`clawgym export`: a captured run written as JSONL, Parquet and a Hugging Face dataset folder, read back
and compared with what the store holds (both backends), and the CLI on a run folder."""

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from clawgym.errors import InvalidArgument
from clawgym.export import FORMATS, export_run, read_export
from clawgym.store.sql import SqlStore
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
