"""labelling indexes: the claim's tiers, the label counts and the labels per minute without a scan of the pool;
label_events.bulk

``next_item`` claims in tiers (items sent to relabel, then the ranking, then the unranked texts by position,
skipped ones last), each one conditional UPDATE whose sub-select walks one of these indexes instead of sorting
a 100,000-text pool; the labelled count reads (project_id, labelled_at), labels per minute (project_id, at).
(project_id, rank, position) replaces 0012's (project_id, rank): with both, PostgreSQL (its statistics taken
before a ranking was written) chose the shorter one for the claim and sorted the whole pool, 160 ms a claim.
``label_events.bulk`` marks the labels recorded in bulk (a project's file, an import), which the labels per
minute leave out.

Revision ID: 0013_labelling_indexes
Revises: 0012_labelling
"""
from alembic import op
import sqlalchemy as sa


revision = '0013_labelling_indexes'
down_revision = '0012_labelling'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('label_items', schema=None) as batch_op:
        batch_op.create_index('ix_label_items_project_rank_position', ['project_id', 'rank', 'position'],
                              unique=False)
        batch_op.drop_index('ix_label_items_project_rank')
        batch_op.create_index('ix_label_items_project_relabel', ['project_id', 'relabel'], unique=False)
        batch_op.create_index('ix_label_items_project_skipped', ['project_id', 'skipped_at'], unique=False)
        batch_op.create_index('ix_label_items_project_labelled', ['project_id', 'labelled_at'], unique=False)
        batch_op.create_index('ix_label_items_project_claimed', ['project_id', 'claimed_by'], unique=False)
    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.add_column(sa.Column('bulk', sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.create_index('ix_label_events_project_at', ['project_id', 'at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.drop_index('ix_label_events_project_at')
        batch_op.drop_column('bulk')
    with op.batch_alter_table('label_items', schema=None) as batch_op:
        batch_op.drop_index('ix_label_items_project_claimed')
        batch_op.drop_index('ix_label_items_project_labelled')
        batch_op.drop_index('ix_label_items_project_skipped')
        batch_op.drop_index('ix_label_items_project_relabel')
        batch_op.create_index('ix_label_items_project_rank', ['project_id', 'rank'], unique=False)
        batch_op.drop_index('ix_label_items_project_rank_position')
