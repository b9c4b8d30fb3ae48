"""The bundled mini suite: reproducible, split without leaks, and every family's tasks are sound."""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from pathlib import Path

from clawgym.orchestrator.check import check_tasks, summarize
from clawgym.sandbox import SandboxConfig, make_sandbox_backend
from clawgym.tasks.loader import load_tasks
from clawgym.tasks.mini.families import FAMILIES
from clawgym.tasks.mini.generate import mini_suite_dir, write_suite
from clawgym.tasks.provision import Provisioner


def tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def test_generation_is_byte_for_byte_reproducible(tmp_path):
    """Same seed and code, same bytes: the suite needs no committed data to be reproducible."""
    write_suite(tmp_path / "a")
    write_suite(tmp_path / "b")
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b"), "two generations differ"


def test_suite_has_16_held_out_and_16_train_tasks_per_family_in_disjoint_splits(tmp_path):
    suite = mini_suite_dir(tmp_path)
    assert mini_suite_dir(tmp_path) == suite, "a second call reuses the generated folder"
    tasks = load_tasks(suite)
    splits = Counter(t.split for t in tasks)
    assert 400 <= len(tasks) <= 500 and splits["test"] >= 14 * 16, f"unexpected sizes: {splits}"
    families = Counter(t.metadata["family"] for t in tasks if t.split == "test")
    assert set(families) == set(FAMILIES), "every family appears in the held-out split"
    per_family = Counter(t.metadata["family"] for t in tasks if t.split == "train")
    assert min(per_family.values()) == 16, f"every family has 16 train tasks: {per_family}"
    train = {t.instruction for t in tasks if t.split == "train"}
    leaked = [t.instruction for t in tasks if t.split == "test" and t.instruction in train]
    assert not leaked, f"held-out instructions also in train: {leaked[:3]}"
    assert len({t.id for t in tasks}) == len(tasks), "task ids are unique"


def test_every_family_passes_its_oracle_and_fails_nop(tmp_path):
    """One task per family and split, in real sandboxes: the reference solution scores 1, doing nothing 0."""
    tasks = load_tasks(mini_suite_dir(tmp_path / "cache"))
    sample = list({(t.metadata["family"], t.split): t for t in tasks}.values())
    cfg = SandboxConfig()
    cfg.local.root_dir = str(tmp_path / "sandboxes")

    async def run():
        backend = make_sandbox_backend(cfg)
        try:
            return await check_tasks(sample, backend, Provisioner(tmp_path / "provision"), concurrency=4)
        finally:
            await backend.close()

    checks = asyncio.run(run())
    bad = [c.as_json() for c in checks if not c.ok]
    assert not bad, f"unsound tasks: {bad[:2]}"
    assert summarize(checks) == {
        "tasks": len(sample),
        "ok": len(sample),
        "oracle_passed": len(sample),
        "nop_failed": len(sample),
        "errors": 0,
        "broken": 0,
    }
