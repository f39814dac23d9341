"""web sessions remember the token that signed them in

Revision ID: 0005_sessions
Revises: 0004_worker
Create Date: 2026-12-03

``tokens.parent_id`` is set on a web session (``/signin``) and names the token it was signed in
with: the session is valid only while that token is (``hub.auth.lookup_token``), so revoking or
expiring a token ends every session made with it. A token with a parent is a session and nothing
else: it serves pages, never the API or the index. Sessions from before this migration have no
parent and would pass for API tokens, so they are revoked (their users sign in again; they are
the read tokens named "web session" with an expiry that ``/signin`` made).
``down_revision`` is the only link to the rest of the chain: re-point it if migrations are renumbered.
"""

import datetime as dt

import sqlalchemy as sa
from alembic import op

revision = "0005_sessions"
down_revision = "0004_worker"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key("fk_tokens_parent_id", "tokens", ["parent_id"], ["id"], ondelete="CASCADE")
        batch_op.create_index("ix_tokens_parent_id", ["parent_id"])
    now = dt.datetime.now(dt.UTC).replace(tzinfo=None)
    op.get_bind().execute(
        sa.text("UPDATE tokens SET revoked_at = :n WHERE name = 'web session' AND scope = 'read'"
                " AND expires_at IS NOT NULL AND revoked_at IS NULL"), {"n": now}
    )


def downgrade() -> None:
    with op.batch_alter_table("tokens", schema=None) as batch_op:
        batch_op.drop_index("ix_tokens_parent_id")
        batch_op.drop_constraint("fk_tokens_parent_id", type_="foreignkey")
        batch_op.drop_column("parent_id")
