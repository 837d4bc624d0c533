"""run.mounts: the buckets a run had copied into volumes before it started
(div run --mount), each with the transfer run that copied it

Revision ID: a1b2c3d4e5f6
Revises: 9d4f6a8b0c12
Create Date: 2026-12-02 04:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = 'a1b2c3d4e5f6'
down_revision = '9d4f6a8b0c12'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run') as batch_op:
        batch_op.add_column(sa.Column('mounts', sa.JSON(), nullable=True))


def downgrade():
    with op.batch_alter_table('run') as batch_op:
        batch_op.drop_column('mounts')
