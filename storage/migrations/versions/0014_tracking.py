"""run mirrors: runs.mlflow_run_id, runs.mirror_warning, sweeps.mlflow_run_id

Each training run may be mirrored to MLflow and TensorBoard (jobs.tracking): its MLflow run id is kept so a
resumed attempt and a backfill write into the same MLflow run, and a sweep's parent run id so that its trials
become that run's children. ``mirror_warning`` says why a mirror is behind until it catches up.

Revision ID: 0014_tracking
Revises: 0013_labelling_indexes
"""
from alembic import op
import sqlalchemy as sa


revision = '0014_tracking'
down_revision = '0013_labelling_indexes'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs') as batch:
        batch.add_column(sa.Column('mlflow_run_id', sa.String(length=64), nullable=True))
        batch.add_column(sa.Column('mirror_warning', sa.Text(), nullable=True))
    with op.batch_alter_table('sweeps') as batch:
        batch.add_column(sa.Column('mlflow_run_id', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sweeps') as batch:
        batch.drop_column('mlflow_run_id')
    with op.batch_alter_table('runs') as batch:
        batch.drop_column('mirror_warning')
        batch.drop_column('mlflow_run_id')
