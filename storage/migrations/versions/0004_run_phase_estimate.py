"""runs: the phase a running run is in (with n of N for evaluation), and the time estimated at submit

Revision ID: 0004_phase_estimate
Revises: 0003_sweeps
"""
from alembic import op
import sqlalchemy as sa


revision = '0004_phase_estimate'
down_revision = '0003_sweeps'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('phase', sa.String(length=40), nullable=True))
        batch_op.add_column(sa.Column('phase_done', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('phase_total', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('estimate', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_column('estimate')
        batch_op.drop_column('phase_total')
        batch_op.drop_column('phase_done')
        batch_op.drop_column('phase')
