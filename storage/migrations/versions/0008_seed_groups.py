"""runs.seed_group and runs.group_seed: runs that differ only in their seed, compared as one group

A group is named by its first run's id; each member keeps a copy of its ``train.seed``, and a unique index on
the pair refuses the same seed twice in a group (two clicks on "repeat with N seeds" cannot double a run).
Existing runs belong to no group.

Revision ID: 0008_seed_groups
Revises: 0007_run_kind
"""
from alembic import op
import sqlalchemy as sa


revision = '0008_seed_groups'
down_revision = '0007_run_kind'
branch_labels = None
depends_on = None

# storage.models.SEED_GROUP_COMPLETE as it was at this revision.
SEED_GROUP_COMPLETE = ("(seed_group IS NULL AND group_seed IS NULL) OR "
                       "(seed_group IS NOT NULL AND group_seed IS NOT NULL)")


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('seed_group', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('group_seed', sa.Integer(), nullable=True))
        batch_op.create_index('ix_runs_seed_group', ['seed_group', 'group_seed'], unique=True)
        batch_op.create_check_constraint('ck_runs_seed_group', SEED_GROUP_COMPLETE)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_constraint('ck_runs_seed_group', type_='check')
        batch_op.drop_index('ix_runs_seed_group')
        batch_op.drop_column('group_seed')
        batch_op.drop_column('seed_group')
