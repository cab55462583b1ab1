"""sweep trial budget: sweeps.n_trials, runs.sweep_n_trials, and constraints that refuse trial n_trials

A trial's run copies its sweep's n_trials; the composite foreign key (sweep_id, sweep_n_trials) ->
sweeps(id, n_trials) keeps the copy true and CHECK (0 <= trial_number < sweep_n_trials) makes the
database refuse a trial past the budget, whatever process asks for it.

Existing rows: each sweep's n_trials comes from its spec; a trial run without a number gets the next
free one; a sweep that already overshot its budget (the lease race this revision closes) keeps its
trials and gets n_trials = the trials it has, so the rows satisfy the new constraints and nothing is lost.

Revision ID: 0006_sweep_trial_budget
Revises: 0005_audits
"""
from alembic import op
import sqlalchemy as sa


revision = '0006_sweep_trial_budget'
down_revision = '0005_audits'
branch_labels = None
depends_on = None

TRIAL_IN_BUDGET = ("sweep_id IS NULL OR (trial_number IS NOT NULL AND sweep_n_trials IS NOT NULL "
                   "AND trial_number >= 0 AND trial_number < sweep_n_trials)")


def _number_existing_trials(connection) -> None:
    sweeps = sa.table('sweeps', sa.column('id', sa.Integer), sa.column('spec', sa.JSON),
                      sa.column('n_trials', sa.Integer))
    runs = sa.table('runs', sa.column('id', sa.Integer), sa.column('sweep_id', sa.Integer),
                    sa.column('trial_number', sa.Integer), sa.column('sweep_n_trials', sa.Integer))
    trials: dict[int, list[tuple[int, int | None]]] = {}
    for run_id, sweep_id, number in connection.execute(
            sa.select(runs.c.id, runs.c.sweep_id, runs.c.trial_number)
            .where(runs.c.sweep_id.is_not(None)).order_by(runs.c.id)):
        trials.setdefault(sweep_id, []).append((run_id, number))
    for sweep_id, spec in connection.execute(sa.select(sweeps.c.id, sweeps.c.spec)).all():
        rows = trials.get(sweep_id, [])
        numbers = [n for _, n in rows if n is not None]
        following = max(numbers, default=-1) + 1
        for run_id, number in rows:
            if number is None:
                connection.execute(sa.update(runs).where(runs.c.id == run_id).values(trial_number=following))
                following += 1
        budget = max(int((spec or {}).get('n_trials') or 1), following, 1)
        connection.execute(sa.update(sweeps).where(sweeps.c.id == sweep_id).values(n_trials=budget))
        connection.execute(sa.update(runs).where(runs.c.sweep_id == sweep_id).values(sweep_n_trials=budget))


def upgrade() -> None:
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.add_column(sa.Column('n_trials', sa.Integer(), nullable=True))
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('sweep_n_trials', sa.Integer(), nullable=True))
    _number_existing_trials(op.get_bind())
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.alter_column('n_trials', existing_type=sa.Integer(), nullable=False)
        batch_op.create_unique_constraint('uq_sweeps_id_n_trials', ['id', 'n_trials'])
        batch_op.create_check_constraint('ck_sweeps_n_trials', 'n_trials >= 1')
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_constraint('fk_runs_sweep_id', type_='foreignkey')
        batch_op.create_foreign_key('fk_runs_sweep_budget', 'sweeps', ['sweep_id', 'sweep_n_trials'],
                                    ['id', 'n_trials'], ondelete='SET NULL')
        batch_op.create_check_constraint('ck_runs_trial_in_budget', TRIAL_IN_BUDGET)


def downgrade() -> None:
    with op.batch_alter_table('runs', schema=None) as batch_op:
        batch_op.drop_constraint('ck_runs_trial_in_budget', type_='check')
        batch_op.drop_constraint('fk_runs_sweep_budget', type_='foreignkey')
        batch_op.create_foreign_key('fk_runs_sweep_id', 'sweeps', ['sweep_id'], ['id'], ondelete='SET NULL')
        batch_op.drop_column('sweep_n_trials')
    with op.batch_alter_table('sweeps', schema=None) as batch_op:
        batch_op.drop_constraint('ck_sweeps_n_trials', type_='check')
        batch_op.drop_constraint('uq_sweeps_id_n_trials', type_='unique')
        batch_op.drop_column('n_trials')
