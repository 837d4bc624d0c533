"""run.restarts: how many times Slurm requeued the run's job after a node
failure (each attempt is billed; the time limit holds over all of them)

Revision ID: 9d4f6a8b0c12
Revises: 8c3e5f7a9b01
Create Date: 2026-12-01 19:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = '9d4f6a8b0c12'
down_revision = '8c3e5f7a9b01'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run') as batch_op:
        batch_op.add_column(sa.Column('restarts', sa.Integer(), nullable=False,
                                      server_default='0'))


def downgrade():
    with op.batch_alter_table('run') as batch_op:
        batch_op.drop_column('restarts')
