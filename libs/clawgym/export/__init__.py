"""Trajectories out of the store: a run's calls and trees as JSONL, Parquet or a Hugging Face `datasets` folder."""

from clawgym.export.tables import CALLS_SCHEMA, TREES_SCHEMA, call_rows, tree_rows
from clawgym.export.writers import FORMATS, export_run, read_export

__all__ = ["CALLS_SCHEMA", "FORMATS", "TREES_SCHEMA", "call_rows", "export_run", "read_export", "tree_rows"]
