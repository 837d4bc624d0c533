"""run.nodes: the nodes Slurm gave a run, for its page

Revision ID: d9e3f4a5b6c7
Revises: c8d2e3f4a5b6
Create Date: 2026-12-02 10:40:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'd9e3f4a5b6c7'
down_revision = 'c8d2e3f4a5b6'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('nodes', sa.String(length=255), nullable=True))


def downgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_column('nodes')
