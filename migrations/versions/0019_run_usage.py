"""run usage: what a run used (its sampler's and Slurm's figures), the idle
policy's state for it, and whether it may idle; channels that hear all of
the old default events hear `idle` too (the new default), so that an idle
policy never stops a run whose owner kept the defaults unwarned

Revision ID: d6e9f0a1b2c3
Revises: c5d8e9f0a1b2
Create Date: 2026-12-07 02:00:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'd6e9f0a1b2c3'
down_revision = 'c5d8e9f0a1b2'
branch_labels = None
depends_on = None


OLD_DEFAULT = {"failed", "checks_failed", "budget_exceeded", "limit_reached"}


def upgrade():
    channels = sa.table('notify_channel', sa.column('id', sa.Integer), sa.column('events', sa.JSON))
    connection = op.get_bind()
    for channel_id, events in connection.execute(sa.select(channels.c.id, channels.c.events)).all():
        if isinstance(events, list) and OLD_DEFAULT <= set(events) and "idle" not in events:
            connection.execute(channels.update().where(channels.c.id == channel_id)
                               .values(events=[*events, "idle"]))
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('usage', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('usage_read_at', sa.Float(), nullable=True))
        batch_op.add_column(sa.Column('idle', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('allow_idle', sa.Boolean(), nullable=False,
                                      server_default=sa.false()))


def downgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_column('allow_idle')
        batch_op.drop_column('idle')
        batch_op.drop_column('usage_read_at')
        batch_op.drop_column('usage')
