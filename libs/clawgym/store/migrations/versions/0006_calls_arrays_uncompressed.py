"""PostgreSQL keeps the calls' packed token arrays uncompressed (STORAGE EXTERNAL): packed int32
ids and float32 logprobs barely compress, and pglz trying on every 80 kB prompt halved the rate
of call inserts (`bench/store_write.py`). Out-of-line TOAST as before, without the compression
attempt; rows written before keep their format. SQLite has no such setting: nothing to do.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ARRAYS = ("prompt_ids", "output_ids", "output_logprobs", "output_versions")


def _set_storage(storage: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE calls " + ", ".join(f"ALTER COLUMN {c} SET STORAGE {storage}" for c in ARRAYS))


def upgrade() -> None:
    _set_storage("EXTERNAL")


def downgrade() -> None:
    _set_storage("EXTENDED")
