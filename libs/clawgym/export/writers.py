"""Writes a run's `calls` and `trees` tables (`tables`) into a folder, and reads such a folder back.

Formats (docs/export.md):
- `jsonl`: calls.jsonl, trees.jsonl, one JSON object per line;
- `parquet`: calls.parquet, trees.parquet (pyarrow, the schemas of `tables`);
- `hf`: calls/ and trees/, each a Hugging Face dataset folder (`datasets.load_from_disk`).
Each folder also holds run.json: the run record, the format, the row counts, and notes on the
text columns (which tokenizer decoded them) and the advantage column (how it was computed).

The store is read one group at a time (`list_groups`, then `get_group`: two queries each), so a
run's size bounds the files, not the memory.
"""

import json
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from clawgym.errors import InvalidArgument
from clawgym.export.advantages import RunSteps
from clawgym.export.tables import CALLS_SCHEMA, TREES_SCHEMA, Annotations, call_rows, tree_rows
from clawgym.records import RolloutWithCalls
from clawgym.store.interface import TrajectoryStore
from clawgym.trajectory.view import Decode

FORMATS = ("jsonl", "parquet", "hf")
TABLES = {"calls": (CALLS_SCHEMA, call_rows), "trees": (TREES_SCHEMA, tree_rows)}
MANIFEST = "run.json"
EXPORT_VERSION = 1  # bumped when a column changes meaning


Annotated = list[tuple[RolloutWithCalls, Annotations]]  # one group's rollouts, each with its annotations


def rollouts_of(
    store: TrajectoryStore, run_id: str, steps: RunSteps, decode: Decode | None = None
) -> Iterator[Annotated]:
    """The run's rollouts with their calls, one group (a list) at a time, in group creation order,
    each with its group's train step, its advantage there and the decoder (`Annotations`)."""
    for summary in store.list_groups(run_id):
        group = store.get_group(summary.id)
        step = steps.step(summary.consumed_version)
        advantage = steps.advantages(group, step)
        yield [(r, Annotations(step, advantage.get(r.rollout.id), decode)) for r in group.rollouts]


def export_run(
    store: TrajectoryStore,
    run_id: str,
    fmt: str,
    out: Path,
    *,
    decode: Decode | None = None,
    decoded_by: str = "",
) -> dict[str, Any]:
    """Writes run `run_id` into the new or empty folder `out` in format `fmt`; returns the manifest.
    `decode`, the tokenizer of the model `decoded_by`, fills the text columns (null without it)."""
    if fmt not in FORMATS:
        raise InvalidArgument(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
    run = store.get_run(run_id)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise InvalidArgument(f"{out} exists and is not an empty folder; export into a new one")
    out.mkdir(parents=True, exist_ok=True)
    steps = RunSteps.read(store, run_id)
    groups = rollouts_of(store, run_id, steps, decode)
    if fmt == "hf":
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            counts = _write_parquet(groups, Path(tmp))
            _parquet_to_hf(Path(tmp), out)
    elif fmt == "parquet":
        counts = _write_parquet(groups, out)
    else:
        counts = _write_jsonl(groups, out)
    text = f"decoded by the tokenizer of {decoded_by or 'the policy'}" if decode else "null: no tokenizer"
    manifest = {
        "export_version": EXPORT_VERSION,
        "format": fmt,
        "run": asdict(run),
        "rows": counts,
        "notes": {"text": text, "advantage": steps.note},
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def read_export(out: Path, tables: tuple[str, ...] = tuple(TABLES)) -> dict[str, list[dict[str, Any]]]:
    """Every row of an export folder's `tables`, as plain Python values, in the order written."""
    fmt = json.loads((out / MANIFEST).read_text())["format"]
    if fmt == "jsonl":
        return {t: [json.loads(line) for line in (out / f"{t}.jsonl").open()] for t in tables}
    if fmt == "parquet":
        return {t: pq.read_table(out / f"{t}.parquet").to_pylist() for t in tables}
    import datasets

    return {t: datasets.load_from_disk(str(out / t)).to_list() for t in tables}


# --- formats ---


def _write_jsonl(groups: Iterable[Annotated], out: Path) -> dict[str, int]:
    counts = dict.fromkeys(TABLES, 0)
    with ExitStack() as stack:
        files = {t: stack.enter_context((out / f"{t}.jsonl").open("w", encoding="utf-8")) for t in TABLES}
        for group in groups:
            for rollout, notes in group:
                for table, (_, rows) in TABLES.items():
                    for row in rows(rollout, notes):
                        files[table].write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
                        counts[table] += 1
    return counts


def _write_parquet(groups: Iterable[Annotated], out: Path) -> dict[str, int]:
    counts = dict.fromkeys(TABLES, 0)
    with ExitStack() as stack:
        writers = {
            t: stack.enter_context(pq.ParquetWriter(out / f"{t}.parquet", schema)) for t, (schema, _) in TABLES.items()
        }
        for group in groups:  # one row group per GRPO group
            for table, (schema, rows) in TABLES.items():
                batch = [row for rollout, notes in group for row in rows(rollout, notes)]
                if batch:
                    writers[table].write_table(pa.Table.from_pylist(batch, schema=schema))
                    counts[table] += len(batch)
    return counts


def _parquet_to_hf(parquet_dir: Path, out: Path) -> None:
    """Each table's Parquet file, memory-mapped, saved as a `datasets` folder (no copy in memory)."""
    import datasets

    for table in TABLES:
        arrow = pq.read_table(parquet_dir / f"{table}.parquet", memory_map=True)
        datasets.Dataset(arrow).save_to_disk(str(out / table))
