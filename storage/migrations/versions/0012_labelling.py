"""labelling projects: label_projects, label_classes, label_items, label_events, label_estimates; runs.label_project_id

A pool of texts labelled in the browser with the model in the loop (workbench.services.labelling,
jobs.labelling). Labels are rows with their history, not JSON blobs; a run may belong to a project (its embed
and refit jobs, and the runs trained from its labels).

Revision ID: 0012_labelling
Revises: 0011_short_job_lane
"""
from alembic import op
import sqlalchemy as sa


revision = '0012_labelling'
down_revision = '0011_short_job_lane'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('label_projects',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('multi_label', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('folder', sa.Text(), nullable=False),
    sa.Column('source_name', sa.String(length=300), nullable=False),
    sa.Column('model', sa.String(length=300), nullable=False),
    sa.Column('strategy', sa.String(length=16), server_default='margin', nullable=False),
    sa.Column('random_share', sa.Float(), server_default='0.1', nullable=False),
    sa.Column('refit_every', sa.Integer(), server_default='10', nullable=False),
    sa.Column('ranked_at_labels', sa.Integer(), server_default='0', nullable=False),
    sa.Column('created_by', sa.String(length=120), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.CheckConstraint('random_share >= 0 AND random_share <= 1', name='ck_label_projects_random_share'),
    sa.CheckConstraint('refit_every >= 1', name='ck_label_projects_refit_every'),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('label_classes',
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['label_projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('project_id', 'position'),
    sa.UniqueConstraint('project_id', 'name', name='uq_label_classes_name')
    )
    op.create_table('label_estimates',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('labels', sa.Integer(), nullable=False),
    sa.Column('metric', sa.String(length=40), nullable=False),
    sa.Column('estimate', sa.Float(), nullable=True),
    sa.Column('low', sa.Float(), nullable=True),
    sa.Column('high', sa.Float(), nullable=True),
    sa.Column('majority', sa.Float(), nullable=True),
    sa.Column('source', sa.String(length=40), nullable=False),
    sa.Column('agreement', sa.Float(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['project_id'], ['label_projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('label_estimates', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_label_estimates_project_id'), ['project_id'], unique=False)

    op.create_table('label_items',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('external_id', sa.String(length=200), nullable=False),
    sa.Column('text', sa.Text(), nullable=False),
    sa.Column('label', sa.JSON(), nullable=True),
    sa.Column('labelled_by', sa.String(length=120), nullable=True),
    sa.Column('labelled_at', sa.DateTime(), nullable=True),
    sa.Column('embedded', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('cluster', sa.Integer(), nullable=True),
    sa.Column('rank', sa.Integer(), nullable=True),
    sa.Column('random_pick', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('relabel', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('suggestion', sa.JSON(), nullable=True),
    sa.Column('confidence', sa.Float(), nullable=True),
    sa.Column('skipped_at', sa.DateTime(), nullable=True),
    sa.Column('claimed_by', sa.String(length=120), nullable=True),
    sa.Column('claim_until', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['project_id'], ['label_projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('project_id', 'position', name='uq_label_items_position')
    )
    with op.batch_alter_table('label_items', schema=None) as batch_op:
        batch_op.create_index('ix_label_items_project_external', ['project_id', 'external_id'], unique=False)
        batch_op.create_index('ix_label_items_project_rank', ['project_id', 'rank'], unique=False)

    op.create_table('label_events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('project_id', sa.Integer(), nullable=False),
    sa.Column('item_id', sa.Integer(), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('label', sa.JSON(), nullable=True),
    sa.Column('previous', sa.JSON(), nullable=True),
    sa.Column('user', sa.String(length=120), nullable=False),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('suggestion', sa.JSON(), nullable=True),
    sa.Column('random_pick', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('undone', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('undoes', sa.Integer(), nullable=True),
    sa.CheckConstraint("action IN ('label', 'skip', 'undo')", name='ck_label_events_action'),
    sa.ForeignKeyConstraint(['item_id'], ['label_items.id'], ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['project_id'], ['label_projects.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_label_events_item_id'), ['item_id'], unique=False)
        batch_op.create_index('ix_label_events_project_user', ['project_id', 'user', 'id'], unique=False)

    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('label_project_id', sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f('ix_runs_label_project_id'), ['label_project_id'], unique=False)
        batch_op.create_foreign_key('fk_runs_label_project_id', 'label_projects', ['label_project_id'], ['id'], ondelete='SET NULL')



def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_runs_label_project_id', type_='foreignkey')
        batch_op.drop_index(batch_op.f('ix_runs_label_project_id'))
        batch_op.drop_column('label_project_id')

    with op.batch_alter_table('label_events', schema=None) as batch_op:
        batch_op.drop_index('ix_label_events_project_user')
        batch_op.drop_index(batch_op.f('ix_label_events_item_id'))

    op.drop_table('label_events')
    with op.batch_alter_table('label_items', schema=None) as batch_op:
        batch_op.drop_index('ix_label_items_project_rank')
        batch_op.drop_index('ix_label_items_project_external')

    op.drop_table('label_items')
    with op.batch_alter_table('label_estimates', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_label_estimates_project_id'))

    op.drop_table('label_estimates')
    op.drop_table('label_classes')
    op.drop_table('label_projects')
