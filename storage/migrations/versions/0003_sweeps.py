"""sweeps: the sweeps table, and runs.sweep_id / runs.trial_number for a sweep's trials

Revision ID: 0003_sweeps
Revises: 0002_queue
"""
from alembic import op
import sqlalchemy as sa


revision = '0003_sweeps'
down_revision = '0002_queue'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('sweeps',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('task', sa.String(length=40), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('study_name', sa.String(length=120), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('lock_owner', sa.String(length=120), nullable=True),
    sa.Column('lock_until', sa.DateTime(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('study_name')
    )
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sweeps_status'), ['status'], unique=False)
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('trial_number', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_runs_sweep_id', 'sweeps', ['sweep_id'], ['id'], ondelete='SET NULL')
        batch_op.create_index('ix_runs_sweep_trial', ['sweep_id', 'trial_number'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_sweep_trial')
        batch_op.drop_constraint('fk_runs_sweep_id', type_='foreignkey')
        batch_op.drop_column('trial_number')
        batch_op.drop_column('sweep_id')
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sweeps_status'))
    op.drop_table('sweeps')
