"""datasets.test_set: a dataset stored or used to evaluate runs on, which the Train tab never preselects

A file uploaded to evaluate a run becomes a stored dataset like any other, and the Train tab used to offer it
first. Marked here, it is offered for training only with a warning (the UI and ``workbench train``). The
datasets some run was already evaluated on are marked on upgrade; the others are not.

Revision ID: 0010_test_sets
Revises: 0009_playground_runtime
"""
from alembic import op
import sqlalchemy as sa


revision = '0010_test_sets'
down_revision = '0009_playground_runtime'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.add_column(sa.Column('test_set', sa.Boolean(), nullable=False, server_default=sa.false()))
    op.execute("UPDATE datasets SET test_set = TRUE WHERE id IN "
               "(SELECT dataset_id FROM runs WHERE kind = 'evaluate' AND dataset_id IS NOT NULL)")


def downgrade() -> None:
    with op.batch_alter_table('datasets', schema=None) as batch_op:
        batch_op.drop_column('test_set')
