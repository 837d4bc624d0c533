"""unix users: the Unix user each run's job runs as, and a member's own

Revision ID: f2a5b6c7d8e9
Revises: e1f4a5b6c7d8
Create Date: 2026-12-06 02:00:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'f2a5b6c7d8e9'
down_revision = 'e1f4a5b6c7d8'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('unix_user', sa.String(length=32), nullable=True))
    with op.batch_alter_table('user', schema=None) as batch_op:
        batch_op.add_column(sa.Column('unix_name', sa.String(length=32), nullable=True))


def downgrade():
    with op.batch_alter_table('user', schema=None) as batch_op:
        batch_op.drop_column('unix_name')
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_column('unix_user')
