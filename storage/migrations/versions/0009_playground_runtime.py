"""playgrounds.runtime: what answers a playground's requests, PyTorch or an exported ONNX variant

"pytorch" serves the run's model folder as before; "onnx-fp32", "onnx-int8" and "onnx-fp16" serve that variant
of the run's newest succeeded export job. Every existing playground keeps PyTorch: the server default fills it,
on SQLite and PostgreSQL alike, without copying the table.

Revision ID: 0009_playground_runtime
Revises: 0008_seed_groups
"""
from alembic import op
import sqlalchemy as sa


revision = '0009_playground_runtime'
down_revision = '0008_seed_groups'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('playgrounds', schema=None) as batch_op:
        batch_op.add_column(sa.Column('runtime', sa.String(length=16), nullable=False, server_default='pytorch'))


def downgrade() -> None:
    with op.batch_alter_table('playgrounds', schema=None) as batch_op:
        batch_op.drop_column('runtime')
