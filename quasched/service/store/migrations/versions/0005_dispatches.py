"""A federation front's dispatches: where and when each of its jobs goes, and what became of it there.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dispatches",
        sa.Column("job_id", sa.Integer(), primary_key=True),
        sa.Column("deadline", sa.Double(), nullable=False),
        sa.Column("run_s", sa.Double(), nullable=False),
        sa.Column("member", sa.String(128), nullable=False),
        sa.Column("release_at", sa.Double(), nullable=True),
        sa.Column("why", sa.String(), nullable=False),
        sa.Column("remote", sa.String(256), nullable=True),
        sa.Column("baseline_member", sa.String(128), nullable=False),
        sa.Column("baseline_kg", sa.Double(), nullable=True),
        sa.Column("sent_at", sa.Double(), nullable=True),
        sa.Column("kwh", sa.Double(), nullable=True),
        sa.Column("kg", sa.Double(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("dispatches")
