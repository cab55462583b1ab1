"""workers.short_jobs: the slots of a worker's short-job lane, beside its max_jobs

Prediction, evaluation and export jobs may run in that lane beside a training run instead of waiting behind
it; the queue's "expected start" reads the lane's size of every live worker from here. Workers registered by
older code have no lane: the server default 0 says so, on SQLite and PostgreSQL alike.

Revision ID: 0011_short_job_lane
Revises: 0010_test_sets
"""
from alembic import op
import sqlalchemy as sa


revision = '0011_short_job_lane'
down_revision = '0010_test_sets'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.add_column(sa.Column('short_jobs', sa.Integer(), nullable=False, server_default='0'))


def downgrade() -> None:
    with op.batch_alter_table('workers', schema=None) as batch_op:
        batch_op.drop_column('short_jobs')
