"""Orchestrator leases: `orchestrators` (one row per live instance, its heartbeat) and
`rollouts.orchestrator_id` (which instance runs the rollout), so a restarted or surviving
orchestrator fails the rollouts a lost one left registered or running and their groups complete.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "orchestrators",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=False),
        sa.Column("heartbeat_at", sa.Double(), nullable=False),
    )
    op.create_index("ix_orchestrators_name", "orchestrators", ["name"])
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("orchestrator_id", sa.Text(), nullable=True))
        batch.create_index("ix_rollouts_orchestrator_id", ["orchestrator_id"])


def downgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_index("ix_rollouts_orchestrator_id")
        batch.drop_column("orchestrator_id")
    op.drop_index("ix_orchestrators_name", table_name="orchestrators")
    op.drop_table("orchestrators")
