"""Initial schema: runs, groups, rollouts, calls, checkpoints, train_steps, evals.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
    )
    op.create_table(
        "checkpoints",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_checkpoints_run_id_runs")),
        sa.PrimaryKeyConstraint("run_id", "version", name=op.f("pk_checkpoints")),
    )
    op.create_table(
        "evals",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("suite", sa.Text(), nullable=False),
        sa.Column("harness", sa.Text(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_evals_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_evals")),
    )
    op.create_index("ix_evals_run_id_version", "evals", ["run_id", "version"], unique=False)
    op.create_table(
        "groups",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("ended", sa.Integer(), nullable=False),
        sa.Column("ready_at", sa.Double(), nullable=True),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_groups_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_groups")),
    )
    op.create_index(op.f("ix_groups_run_id"), "groups", ["run_id"], unique=False)
    op.create_table(
        "train_steps",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.BigInteger(), nullable=False),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_train_steps_run_id_runs")),
        sa.PrimaryKeyConstraint("run_id", "step", name=op.f("pk_train_steps")),
    )
    op.create_table(
        "rollouts",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("group_id", sa.Text(), nullable=False),
        sa.Column("group_index", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Text(), nullable=False),
        sa.Column("harness", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reward", sa.Double(), nullable=True),
        sa.Column("passed", sa.Boolean(), nullable=True),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("policy_version_start", sa.BigInteger(), nullable=False),
        sa.Column("sandbox", sa.Text(), nullable=False),
        sa.Column("timings", sa.JSON(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.Column("started_at", sa.Double(), nullable=True),
        sa.Column("ended_at", sa.Double(), nullable=True),
        sa.ForeignKeyConstraint(["group_id"], ["groups.id"], name=op.f("fk_rollouts_group_id_groups")),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], name=op.f("fk_rollouts_run_id_runs")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rollouts")),
    )
    op.create_index("uq_rollouts_group_id_group_index", "rollouts", ["group_id", "group_index"], unique=True)
    op.create_index(op.f("ix_rollouts_run_id"), "rollouts", ["run_id"], unique=False)
    op.create_index(op.f("ix_rollouts_token_hash"), "rollouts", ["token_hash"], unique=True)
    op.create_table(
        "calls",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("rollout_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("protocol", sa.String(length=32), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.Column("headers", sa.JSON(), nullable=False),
        sa.Column("prompt_ids", sa.LargeBinary(), nullable=False),
        sa.Column("output_ids", sa.LargeBinary(), nullable=False),
        sa.Column("output_logprobs", sa.LargeBinary(), nullable=False),
        sa.Column("output_versions", sa.LargeBinary(), nullable=False),
        sa.Column("n_prompt", sa.Integer(), nullable=False),
        sa.Column("n_output", sa.Integer(), nullable=False),
        sa.Column("policy_version", sa.BigInteger(), nullable=False),
        sa.Column("finish_reason", sa.String(length=16), nullable=False),
        sa.Column("latency_s", sa.Double(), nullable=False),
        sa.Column("created_at", sa.Double(), nullable=False),
        sa.ForeignKeyConstraint(["rollout_id"], ["rollouts.id"], name=op.f("fk_calls_rollout_id_rollouts")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calls")),
    )
    op.create_index("uq_calls_rollout_id_seq", "calls", ["rollout_id", "seq"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_calls_rollout_id_seq", table_name="calls")
    op.drop_table("calls")
    op.drop_index(op.f("ix_rollouts_token_hash"), table_name="rollouts")
    op.drop_index(op.f("ix_rollouts_run_id"), table_name="rollouts")
    op.drop_index("uq_rollouts_group_id_group_index", table_name="rollouts")
    op.drop_table("rollouts")
    op.drop_table("train_steps")
    op.drop_index(op.f("ix_groups_run_id"), table_name="groups")
    op.drop_table("groups")
    op.drop_index("ix_evals_run_id_version", table_name="evals")
    op.drop_table("evals")
    op.drop_table("checkpoints")
    op.drop_table("runs")
