"""check runs bound to the claiming token, with the files of the claim

Revision ID: 0004_worker
Revises: 0003
Create Date: 2026-12-03

``claimed_by_token_id``: the worker token whose claim holds the lease (a heartbeat, report or
download by any other token is refused, even with the lease). ``job_files``: the files the claim
may download (the wheel and its same-owner hub dependencies, resolved by the hub at claim time), as
JSON. ``down_revision`` is the only link to the rest of the chain: re-point it if migrations are
renumbered.
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_worker"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.add_column(sa.Column("claimed_by_token_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("job_files", sa.Text(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("check_runs") as batch:
        batch.drop_column("job_files")
        batch.drop_column("claimed_by_token_id")
