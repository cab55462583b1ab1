"""audits: label audits (k fold runs each), the user's decisions per flagged example, runs.audit_id / runs.fold

Revision ID: 0005_audits
Revises: 0004_phase_estimate
"""
from alembic import op
import sqlalchemy as sa


revision = '0005_audits'
down_revision = '0004_phase_estimate'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('audits',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('dataset_id', sa.String(length=32), nullable=True),
    sa.Column('task', sa.String(length=40), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('folder', sa.Text(), nullable=False),
    sa.Column('summary', sa.JSON(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.ForeignKeyConstraint(['dataset_id'], ['datasets.id'], ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('audits', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_audits_dataset_id'), ['dataset_id'], unique=False)
    op.create_table('audit_decisions',
    sa.Column('audit_id', sa.Integer(), nullable=False),
    sa.Column('example', sa.String(length=40), nullable=False),
    sa.Column('action', sa.String(length=16), nullable=False),
    sa.Column('label', sa.JSON(), nullable=True),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.ForeignKeyConstraint(['audit_id'], ['audits.id'], ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('audit_id', 'example')
    )
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('audit_id', sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column('fold', sa.Integer(), nullable=True))
        batch_op.create_foreign_key('fk_runs_audit_id', 'audits', ['audit_id'], ['id'], ondelete='SET NULL')
        batch_op.create_index('ix_runs_audit_fold', ['audit_id', 'fold'], unique=True)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_index('ix_runs_audit_fold')
        batch_op.drop_constraint('fk_runs_audit_id', type_='foreignkey')
        batch_op.drop_column('fold')
        batch_op.drop_column('audit_id')
    op.drop_table('audit_decisions')
    with op.batch_alter_table('audits', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_audits_dataset_id'))
    op.drop_table('audits')
