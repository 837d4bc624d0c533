"""user.session_epoch: signing out or changing a password ends the user's sessions

Revision ID: 6e1c0a5d2b17
Revises: 4a16f828223d
Create Date: 2026-12-01 07:40:00

"""
from alembic import op
import sqlalchemy as sa


revision = '6e1c0a5d2b17'
down_revision = '4a16f828223d'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('user') as batch_op:
        batch_op.add_column(sa.Column('session_epoch', sa.Integer(), nullable=False,
                                      server_default='0'))


def downgrade():
    with op.batch_alter_table('user') as batch_op:
        batch_op.drop_column('session_epoch')
