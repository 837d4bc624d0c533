"""org storage quota: the site's per-org quota, and the org's use as last measured

Revision ID: e1f4a5b6c7d8
Revises: d9e3f4a5b6c7
Create Date: 2026-12-03 12:30:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'e1f4a5b6c7d8'
down_revision = 'd9e3f4a5b6c7'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('org', schema=None) as batch_op:
        batch_op.add_column(sa.Column('storage_quota_bytes', sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column('storage_used_bytes', sa.BigInteger(), nullable=False,
                                      server_default='0'))
        batch_op.add_column(sa.Column('storage_measured_at', sa.DateTime(timezone=True), nullable=True))


def downgrade():
    with op.batch_alter_table('org', schema=None) as batch_op:
        batch_op.drop_column('storage_measured_at')
        batch_op.drop_column('storage_used_bytes')
        batch_op.drop_column('storage_quota_bytes')
