"""Rubric rewards: `judgments` (an LLM judge's scoring of a rollout's rubric) and
`rollouts.reward_breakdown` (where a hybrid reward came from; NULL for a code-only reward).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("rollouts") as batch:
        batch.add_column(sa.Column("reward_breakdown", sa.JSON(), nullable=True))
    op.create_table(
        "judgments",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("rollout_id", sa.String(length=32), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("prompt", sa.JSON(), nullable=False),
        sa.Column("raw_answer", sa.Text(), nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("rule_scores", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("code_score", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["rollout_id"], ["rollouts.id"], name=op.f("fk_judgments_rollout_id_rollouts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_judgments")),
        sa.UniqueConstraint("rollout_id", name=op.f("uq_judgments_rollout_id")),
    )


def downgrade() -> None:
    op.drop_table("judgments")
    with op.batch_alter_table("rollouts") as batch:
        batch.drop_column("reward_breakdown")
