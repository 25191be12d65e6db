"""One writer per database: the leader's lease (one row: epoch, holder, expiry), the history of its
terms, and the epoch of the leader that wrote each event.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    lease = op.create_table(
        "lease",
        sa.Column("id", sa.Integer(), nullable=False), sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("holder", sa.String(256), nullable=False), sa.Column("url", sa.String(1024), nullable=False),
        sa.Column("since", sa.Double(), nullable=False), sa.Column("expires_at", sa.Double(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_lease"),
    )
    op.bulk_insert(lease, [{"id": 1, "epoch": 0, "holder": "", "url": "", "since": 0.0, "expires_at": 0.0}])
    op.create_table(
        "leader_terms",
        sa.Column("epoch", sa.Integer(), nullable=False), sa.Column("holder", sa.String(256), nullable=False),
        sa.Column("url", sa.String(1024), nullable=False), sa.Column("since", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint("epoch", name="pk_leader_terms"),
    )
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_column("epoch")
    op.drop_table("leader_terms")
    op.drop_table("lease")
