"""run end heard: when a follower saw the run's command end, so the
reconciler settles it at once

Revision ID: b4c7d8e9f0a1
Revises: a3b6c7d8e9f0
Create Date: 2026-12-06 05:00:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'b4c7d8e9f0a1'
down_revision = 'a3b6c7d8e9f0'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('end_heard_at', sa.DateTime(timezone=True), nullable=True))
        # Asked every 50 ms between cycles: the few runs heard ending, not every live one.
        batch_op.create_index('ix_run_end_heard_at', ['end_heard_at'])


def downgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_index('ix_run_end_heard_at')
        batch_op.drop_column('end_heard_at')
