"""runs.kind: a run trains a model ("train"), or puts a finished run's model to work ("predict", "evaluate")

Prediction and evaluation jobs are rows of ``runs`` so that they share the queue's leases, workers, cancel
and crash resume; the kind tells the worker which job to execute. Every existing row is a training run:
the server default fills it, on SQLite and PostgreSQL alike, without copying the table.

Revision ID: 0007_run_kind
Revises: 0006_sweep_trial_budget
"""
from alembic import op
import sqlalchemy as sa


revision = '0007_run_kind'
down_revision = '0006_sweep_trial_budget'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('kind', sa.String(length=16), nullable=False, server_default='train'))
        batch_op.create_index('ix_runs_parent_kind', ['parent_run_id', 'kind'], unique=False)


def downgrade() -> None:
    # Code before this revision would read a prediction job's spec as a training spec (and fail every claim of
    # it): the jobs go, their model runs stay.
    op.execute("DELETE FROM runs WHERE kind <> 'train'")
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_parent_kind')
        batch_op.drop_column('kind')
