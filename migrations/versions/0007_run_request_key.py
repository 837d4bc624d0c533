"""run.request_key: the key `div run` sends with POST /runs, so a retry after
a lost answer gets the same run instead of a second one

Revision ID: 7b2d4e6f8a90
Revises: 6e1c0a5d2b17
Create Date: 2026-12-01 13:30:00

"""
from alembic import op
import sqlalchemy as sa


revision = '7b2d4e6f8a90'
down_revision = '6e1c0a5d2b17'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run') as batch_op:
        batch_op.add_column(sa.Column('request_key', sa.String(length=64), nullable=True))
    op.create_index('ux_run_org_request_key', 'run', ['org_id', 'request_key'], unique=True)


def downgrade():
    op.drop_index('ux_run_org_request_key', table_name='run')
    with op.batch_alter_table('run') as batch_op:
        batch_op.drop_column('request_key')
