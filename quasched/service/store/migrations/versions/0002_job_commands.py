"""Jobs carry a command (argv, environment, working directory) and a time limit; their exit code and
usage (wall seconds, GPU-hours) are recorded.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

def columns() -> list[sa.Column]:
    return [
        sa.Column("command", sa.JSON(), nullable=False, server_default="[]"),
        sa.Column("env", sa.JSON(), nullable=False, server_default="{}"),
        sa.Column("workdir", sa.String(), nullable=False, server_default=""),
        sa.Column("time_limit_s", sa.Double(), nullable=True),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("wall_s", sa.Double(), nullable=False, server_default="0"),
        sa.Column("gpu_hours", sa.Double(), nullable=False, server_default="0"),
    ]


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in columns():
            batch.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        for column in reversed(columns()):
            batch.drop_column(column.name)
