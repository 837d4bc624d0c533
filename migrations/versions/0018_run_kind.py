"""run kind: batch, or an interactive shell or notebook (div shell, div notebook)

Revision ID: c5d8e9f0a1b2
Revises: b4c7d8e9f0a1
Create Date: 2026-12-06 23:00:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'c5d8e9f0a1b2'
down_revision = 'b4c7d8e9f0a1'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=8), nullable=False,
                                      server_default='batch'))


def downgrade():
    with op.batch_alter_table('run', schema=None) as batch_op:
        batch_op.drop_column('kind')
