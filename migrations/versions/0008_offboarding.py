"""Offboarding: org.removed_at and user.removed_at (removed, records kept),
api_key.expires_at (a key that stops working by itself)

Revision ID: 8c3e5f7a9b01
Revises: 7b2d4e6f8a90
Create Date: 2026-12-01 16:30:00

"""
from alembic import op
import sqlalchemy as sa


revision = '8c3e5f7a9b01'
down_revision = '7b2d4e6f8a90'
branch_labels = None
depends_on = None


def upgrade():
    for table, column in (('org', 'removed_at'), ('user', 'removed_at'), ('api_key', 'expires_at')):
        with op.batch_alter_table(table) as batch_op:
            batch_op.add_column(sa.Column(column, sa.DateTime(timezone=True), nullable=True))


def downgrade():
    for table, column in (('org', 'removed_at'), ('user', 'removed_at'), ('api_key', 'expires_at')):
        with op.batch_alter_table(table) as batch_op:
            batch_op.drop_column(column)
