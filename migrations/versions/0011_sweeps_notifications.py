"""sweeps (job arrays), notification channels and their outbox, run.sweep_*
and run.schedule_name, schedule.tz

Revision ID: b7c1d2e3f4a5
Revises: a1b2c3d4e5f6
Create Date: 2026-12-02 06:16:36.738203

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'b7c1d2e3f4a5'
down_revision = 'a1b2c3d4e5f6'
branch_labels = None
depends_on = None


def upgrade():
    op.create_table('notify_channel',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('org_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=8), nullable=False),
    sa.Column('target', sa.String(length=2048), nullable=False),
    sa.Column('events', sa.JSON(), nullable=False),
    sa.Column('schedule_name', sa.String(length=63), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_delivery_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('last_error_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['org_id'], ['org.id'], name=op.f('fk_notify_channel_org_id_org')),
    sa.ForeignKeyConstraint(['user_id'], ['user.id'], name=op.f('fk_notify_channel_user_id_user')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notify_channel')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('notify_channel', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notify_channel_org_id'), ['org_id'], unique=False)

    op.create_table('sweep',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('org_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=63), nullable=False),
    sa.Column('axes', sa.JSON(), nullable=False),
    sa.Column('size', sa.Integer(), nullable=False),
    sa.Column('schedule_name', sa.String(length=63), nullable=True),
    sa.Column('request_key', sa.String(length=64), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['org_id'], ['org.id'], name=op.f('fk_sweep_org_id_org')),
    sa.ForeignKeyConstraint(['user_id'], ['user.id'], name=op.f('fk_sweep_user_id_user')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sweep')),
    sa.UniqueConstraint('org_id', 'name', name=op.f('uq_sweep_org_id'))
    )
    with op.batch_alter_table('sweep', schema=None) as batch_op:
        batch_op.create_index('ux_sweep_org_request_key', ['org_id', 'request_key'], unique=True)

    op.create_table('notification',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('org_id', sa.Integer(), nullable=False),
    sa.Column('channel_id', sa.Integer(), nullable=False),
    sa.Column('run_name', sa.String(length=63), nullable=False),
    sa.Column('event', sa.String(length=16), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('body', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=8), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('claimed_until', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('sent_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['channel_id'], ['notify_channel.id'], name=op.f('fk_notification_channel_id_notify_channel'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['org_id'], ['org.id'], name=op.f('fk_notification_org_id_org')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notification'))
    )
    with op.batch_alter_table('notification', schema=None) as batch_op:
        batch_op.create_index('ix_notification_due', ['status', 'next_attempt_at'], unique=False)

    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('sweep_index', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('sweep_values', sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column('schedule_name', sa.String(length=63), nullable=True))
        batch_op.create_index(batch_op.f('ix_run_sweep_id'), ['sweep_id'], unique=False)
        batch_op.create_foreign_key(batch_op.f('fk_run_sweep_id_sweep'), 'sweep', ['sweep_id'], ['id'])

    with op.batch_alter_table('schedule', schema=None) as batch_op:
        batch_op.add_column(sa.Column('tz', sa.String(length=64), server_default='UTC', nullable=False))



def downgrade():
    with op.batch_alter_table('schedule', schema=None) as batch_op:
        batch_op.drop_column('tz')

    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f('fk_run_sweep_id_sweep'), type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_run_sweep_id'))
        batch_op.drop_column('schedule_name')
        batch_op.drop_column('sweep_values')
        batch_op.drop_column('sweep_index')
        batch_op.drop_column('sweep_id')

    with op.batch_alter_table('notification', schema=None) as batch_op:
        batch_op.drop_index('ix_notification_due')

    op.drop_table('notification')
    with op.batch_alter_table('sweep', schema=None) as batch_op:
        batch_op.drop_index('ux_sweep_org_request_key')

    op.drop_table('sweep')
    with op.batch_alter_table('notify_channel', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notify_channel_org_id'))

    op.drop_table('notify_channel')
