"""A run folder's files and a checkpoint folder's names: what commands and the trainer write and read back."""

import json

import pytest
import yaml

from clawgym.config import ClawgymConfig
from clawgym.errors import NotFound
from clawgym.records import Checkpoint
from clawgym.report.run_folder import new_run_dir, store_url, write_summary
from clawgym.run import in_folder, write_run_config
from clawgym.store.sql import SqlStore
from clawgym.trainer.checkpoint import (
    find_checkpoint,
    kept_checkpoints,
    prune_checkpoints,
    recorded_run_id,
    resolve_run,
    version_of,
    version_uri,
)


def test_a_new_run_folder_never_reuses_an_existing_one(tmp_path):
    first, second = new_run_dir(tmp_path), new_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir(), "two runs in one second get two folders"


def test_config_and_summary_read_back_as_written(tmp_path):
    cfg = ClawgymConfig(store={"url": store_url(tmp_path)})
    saved = ClawgymConfig(**yaml.safe_load(write_run_config(tmp_path, cfg).read_text()))
    assert saved.store.url == f"sqlite:///{tmp_path / 'clawgym.db'}", "config.yaml reproduces the config"
    path = write_summary(tmp_path, {"pass1_before": 0.1, "ci95_before": [0.0, 0.3]})
    assert json.loads(path.read_text()) == {"pass1_before": 0.1, "ci95_before": [0.0, 0.3]}
    assert path.read_text().endswith("}\n"), "one trailing newline"


def test_a_run_keeps_what_its_config_left_to_defaults_in_its_folder_and_its_secrets_out(tmp_path, monkeypatch):
    """The store and checkpoints a config leaves to defaults live in the run folder; what it names
    stays where it said, made absolute; config.yaml holds no secret."""
    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "runs" / "r"
    kept = in_folder(ClawgymConfig(trainer={"model": "tiny-qwen3"}), folder)
    assert kept.store.url == f"sqlite:///{folder / 'clawgym.db'}", kept.store.url
    assert kept.trainer.checkpoint_uri == str(folder / "checkpoints") and kept.trainer.run_dir == str(folder)
    named = in_folder(
        ClawgymConfig(store={"url": "sqlite:///mine.db"}, trainer={"checkpoint_uri": "ckpt"}), folder
    )
    assert named.store.url == f"sqlite:///{tmp_path / 'mine.db'}", "a named store stays, made absolute"
    assert named.trainer.checkpoint_uri == str(tmp_path / "ckpt")
    secret = ClawgymConfig(
        store={"url": "postgresql+psycopg://clawgym:hunter2@db:5432/clawgym"}, rpc={"secret": "s3cr3t-value"}
    )
    folder.mkdir(parents=True)
    text = write_run_config(folder, secret).read_text()
    assert "hunter2" not in text and "s3cr3t-value" not in text, text
    assert "clawgym:***@db:5432" in text, "the URL stays readable, its password starred"


def test_a_version_folder_name_gives_its_version_and_anything_else_none():
    cfg = ClawgymConfig().trainer
    assert version_of(version_uri(cfg, 5)) == 5, "the trainer's own v000005"
    assert version_of("s3://bucket/run/v12/") == 12, "a hand-named folder, trailing slash and all"
    assert version_of("/ckpt/final") is None and version_of("v") is None, "no version in the name"


def test_the_run_marker_is_read_back_and_registered_versions_are_found(tmp_path):
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    cfg = ClawgymConfig(trainer={"model": "tiny-qwen3", "checkpoint_uri": str(tmp_path / "ckpt")}).trainer
    assert recorded_run_id(cfg) == "", "no run.json yet"
    run_id = resolve_run(store, cfg)
    assert recorded_run_id(cfg) == run_id, "resolve_run records the new run in run.json"
    with pytest.raises(NotFound, match=r"checkpoint v3 of run .* was never registered; kept: none"):
        find_checkpoint(store, run_id, 3)


def test_pruning_keeps_the_newest_and_every_keep_every_th_version_and_lookups_name_what_is_kept(tmp_path):
    """keep_checkpoints=1, keep_every=2 over v1..v5: v2, v4 and v5 stay; a version looked up that was
    pruned, or never registered, is NotFound naming the kept ones."""
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    cfg = ClawgymConfig(
        trainer={"checkpoint_uri": str(tmp_path / "ckpt"), "keep_checkpoints": 1, "keep_every": 2}
    ).trainer
    run_id = resolve_run(store, cfg)
    for v in range(1, 6):
        uri = version_uri(cfg, v)
        (tmp_path / "ckpt" / cfg.run_name / f"v{v:06d}").mkdir()
        store.record_checkpoint(Checkpoint(run_id, v, v, uri, {}))
        prune_checkpoints(cfg, v)
    folders = sorted(p.name for p in (tmp_path / "ckpt" / cfg.run_name).glob("v*"))
    assert folders == ["v000002", "v000004", "v000005"], f"the last and every 2nd version stay: {folders}"
    assert sorted(kept_checkpoints(store, run_id)) == [2, 4, 5], "kept = registered and still on disk"
    assert find_checkpoint(store, run_id, 4) == version_uri(cfg, 4)
    with pytest.raises(NotFound, match=r"checkpoint v3 of run .* was not kept .*; kept: v2, v4, v5"):
        find_checkpoint(store, run_id, 3)
    with pytest.raises(NotFound, match=r"checkpoint v9 of run .* was never registered; kept: v2, v4, v5"):
        find_checkpoint(store, run_id, 9)
    store.close()
