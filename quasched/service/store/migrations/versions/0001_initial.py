"""Initial schema: jobs, events, nodes, queues, tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def col(name: str, type_: sa.types.TypeEngine | type[sa.types.TypeEngine], null: bool = False) -> sa.Column:
    return sa.Column(name, type_, nullable=null)


def upgrade() -> None:
    op.create_table(
        "jobs",
        col("id", sa.Integer()), col("seq", sa.Integer()),
        col("name", sa.String(256)), col("team", sa.String(128)), col("cpu_milli", sa.Integer()),
        col("memory_mib", sa.Integer()), col("num_gpu", sa.Integer()), col("gpu_milli", sa.Integer()),
        col("gpu_model", sa.String(128)), col("pods", sa.Integer()), col("user", sa.String(128)),
        col("app", sa.String(256)), col("max_per_node", sa.Integer()), col("priority_class", sa.String(64)),
        col("duration_s", sa.Double(), null=True), col("client_token", sa.String(256), null=True),
        col("priority", sa.Integer()), col("submitted_at", sa.Double()), col("state", sa.String(16)),
        col("started_at", sa.Double(), null=True), col("finished_at", sa.Double(), null=True),
        col("placement", sa.JSON()), col("reason_code", sa.String(32), null=True),
        col("reason_message", sa.String(), null=True), col("reason_evidence", sa.JSON(), null=True),
        col("quota_model", sa.String(128)), col("preempt_at", sa.Double(), null=True), col("solver", sa.String(64)),
        col("gap", sa.Double(), null=True), col("restarts", sa.Integer()),
        sa.PrimaryKeyConstraint("id", name="pk_jobs"),
        sa.UniqueConstraint("client_token", name="uq_jobs_client_token"),
        sqlite_autoincrement=True,
    )
    for column in ("seq", "state", "team"):
        op.create_index(f"ix_jobs_{column}", "jobs", [column])
    op.create_table(
        "events",
        col("id", sa.Integer()), col("time", sa.Double()), col("kind", sa.String(64)),
        col("job_id", sa.Integer(), null=True), col("node", sa.String(256)), col("data", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_events_job_id", "events", ["job_id"])
    op.create_table(
        "nodes",
        col("id", sa.Integer()), col("name", sa.String(256)), col("cpu_milli", sa.Integer()),
        col("memory_mib", sa.Integer()), col("num_gpus", sa.Integer()), col("gpu_model", sa.String(128)),
        col("labels", sa.JSON()), col("cordoned", sa.Boolean()), col("unhealthy", sa.JSON()),
        sa.PrimaryKeyConstraint("id", name="pk_nodes"),
        sa.UniqueConstraint("name", name="uq_nodes_name"),
    )
    op.create_table(
        "queues",
        col("name", sa.String(128)), col("quota", sa.JSON()), col("cohort", sa.String(128)),
        col("borrowing_limit", sa.Double(), null=True), col("weight", sa.Double()),
        sa.PrimaryKeyConstraint("name", name="pk_queues"),
    )
    op.create_table(
        "tokens",
        col("id", sa.Integer()), col("name", sa.String(128)), col("sha256", sa.String(64)),
        col("team", sa.String(128), null=True), col("admin", sa.Boolean()),
        sa.PrimaryKeyConstraint("id", name="pk_tokens"),
        sa.UniqueConstraint("sha256", name="uq_tokens_sha256"),
    )


def downgrade() -> None:
    for table in ("tokens", "queues", "nodes", "events", "jobs"):
        op.drop_table(table)
