"""accounts: users, web sessions, API tokens, the activity log (append-only), owners of work

Every piece of work (datasets, runs, sweeps, audits, labelling projects, playgrounds) records the user who made it
in ``owner_id``; rows made before this revision keep NULL until the first admin is created, who then owns them
(``workbench.services.accounts.add_user``). The activity log refuses UPDATE and DELETE for everyone, admins
included: a trigger on SQLite and on PostgreSQL.

Revision ID: 0015_accounts
Revises: 0014_tracking
"""
from alembic import op
import sqlalchemy as sa


revision = '0015_accounts'
down_revision = '0014_tracking'
branch_labels = None
depends_on = None

OWNED = ('datasets', 'runs', 'sweeps', 'audits', 'label_projects', 'playgrounds')


def upgrade() -> None:
    op.create_table(
        'users',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('name', sa.String(length=120), nullable=False),
        sa.Column('password_hash', sa.String(length=255), nullable=False),
        sa.Column('role', sa.String(length=16), nullable=False),
        sa.Column('disabled', sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('last_sign_in_at', sa.DateTime(), nullable=True),
        sa.CheckConstraint("role IN ('viewer', 'editor', 'admin')", name='ck_users_role'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('name'),
    )
    op.create_table(
        'web_sessions',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('expires_at', sa.DateTime(), nullable=False),
        sa.Column('address', sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_hash'),
    )
    op.create_index('ix_web_sessions_user_id', 'web_sessions', ['user_id'])
    op.create_table(
        'api_tokens',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=False),
        sa.Column('name', sa.String(length=120), nullable=False),
        sa.Column('scope', sa.String(length=8), nullable=False),
        sa.Column('token_hash', sa.String(length=64), nullable=False),
        sa.Column('created_at', sa.DateTime(), nullable=False),
        sa.Column('expires_at', sa.DateTime(), nullable=True),
        sa.Column('last_used_at', sa.DateTime(), nullable=True),
        sa.Column('revoked_at', sa.DateTime(), nullable=True),
        sa.CheckConstraint("scope IN ('read', 'write')", name='ck_api_tokens_scope'),
        sa.ForeignKeyConstraint(['user_id'], ['users.id'], ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('id'),
        sa.UniqueConstraint('token_hash'),
    )
    op.create_index('ix_api_tokens_user_id', 'api_tokens', ['user_id'])
    op.create_table(
        'activity',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('at', sa.DateTime(), nullable=False),
        sa.Column('user_id', sa.Integer(), nullable=True),
        sa.Column('user_name', sa.String(length=120), nullable=False),
        sa.Column('token_name', sa.String(length=120), nullable=True),
        sa.Column('action', sa.String(length=32), nullable=False),
        sa.Column('target_kind', sa.String(length=32), nullable=True),
        sa.Column('target_id', sa.String(length=120), nullable=True),
        sa.Column('detail', sa.JSON(), nullable=True),
        sa.Column('address', sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    op.create_index('ix_activity_at', 'activity', ['at'])
    op.create_index('ix_activity_user_id', 'activity', ['user_id'])
    op.create_index('ix_activity_action', 'activity', ['action'])
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('owner_id', sa.Integer(), nullable=True))
            batch.create_index(f'ix_{table}_owner_id', ['owner_id'])
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("CREATE FUNCTION activity_append_only() RETURNS trigger AS $$ BEGIN "
                   "RAISE EXCEPTION 'the activity log is append-only'; END; $$ LANGUAGE plpgsql")
        op.execute("CREATE TRIGGER activity_no_update BEFORE UPDATE OR DELETE ON activity "
                   "FOR EACH ROW EXECUTE FUNCTION activity_append_only()")
        op.execute("CREATE TRIGGER activity_no_truncate BEFORE TRUNCATE ON activity "
                   "FOR EACH STATEMENT EXECUTE FUNCTION activity_append_only()")
    else:
        op.execute("CREATE TRIGGER activity_no_update BEFORE UPDATE ON activity "
                   "BEGIN SELECT RAISE(ABORT, 'the activity log is append-only'); END")
        op.execute("CREATE TRIGGER activity_no_delete BEFORE DELETE ON activity "
                   "BEGIN SELECT RAISE(ABORT, 'the activity log is append-only'); END")


def downgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute("DROP TRIGGER IF EXISTS activity_no_update ON activity")
        op.execute("DROP TRIGGER IF EXISTS activity_no_truncate ON activity")
        op.execute("DROP FUNCTION IF EXISTS activity_append_only()")
    for table in reversed(OWNED):
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f'ix_{table}_owner_id')
            batch.drop_column('owner_id')
    op.drop_table('activity')
    op.drop_table('api_tokens')
    op.drop_table('web_sessions')
    op.drop_table('users')
