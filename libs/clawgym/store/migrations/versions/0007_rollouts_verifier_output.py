"""rollouts.verifier_output and rollouts.harness_stderr: why a task outcome was what it was, kept for
a person reading a failed rollout (the browser): the verifier's output and the tail of the harness's
stderr. Rows written before get "" (not recorded).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("verifier_output", sa.Text(), server_default="", nullable=False))
        batch.add_column(sa.Column("harness_stderr", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("harness_stderr")
        batch.drop_column("verifier_output")
