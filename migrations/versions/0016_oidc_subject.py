"""oidc subject: who the site's OpenID Connect provider says a user is

Revision ID: a3b6c7d8e9f0
Revises: f2a5b6c7d8e9
Create Date: 2026-12-06 02:30:00.000000

"""
from alembic import op
import sqlalchemy as sa

# revision identifiers, used by Alembic.
revision = 'a3b6c7d8e9f0'
down_revision = 'f2a5b6c7d8e9'
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table('user', schema=None) as batch_op:
        batch_op.add_column(sa.Column('oidc_subject', sa.String(length=512), nullable=True))
        batch_op.create_unique_constraint('uq_user_oidc_subject', ['oidc_subject'])


def downgrade():
    with op.batch_alter_table('user', schema=None) as batch_op:
        batch_op.drop_constraint('uq_user_oidc_subject', type_='unique')
        batch_op.drop_column('oidc_subject')
