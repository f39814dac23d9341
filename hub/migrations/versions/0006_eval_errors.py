"""eval results carry their error counts: rollouts with a recorded error, and infrastructure ones

Revision ID: 0006_evals
Revises: 0005_sessions
Create Date: 2026-12-03

``num_errors`` / ``num_infra_errors`` come from the run's metadata.json (``vf eval --push``);
infrastructure failures are left out of ``avg_reward``, so a leaderboard row shows how many rollouts
its average stands on. Nullable: results posted before carry no counts. ``down_revision`` is the
only link to the rest of the chain: re-point it if migrations are renumbered.
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_evals"
down_revision = "0005_sessions"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("eval_results") as batch:
        batch.add_column(sa.Column("num_errors", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("num_infra_errors", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("eval_results") as batch:
        batch.drop_column("num_infra_errors")
        batch.drop_column("num_errors")
