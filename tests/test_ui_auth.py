"""WORKBENCH_AUTH parsing: inline pairs, a users file, and clear errors."""
from __future__ import annotations

import pytest

from workbench.errors import ConfigError
from workbench.server import parse_auth


def test_empty_means_no_login():
    assert parse_auth("") == []
    assert parse_auth("   ") == []


def test_inline_pairs_and_passwords_with_colons():
    assert parse_auth("alice:s3cret") == [("alice", "s3cret")]
    assert parse_auth("alice:a, bob:b:c") == [("alice", "a"), ("bob", "b:c")]


def test_users_file(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("# team\nalice:one\n\nbob:two\n", encoding="utf-8")
    assert parse_auth(str(users)) == [("alice", "one"), ("bob", "two")]


@pytest.mark.parametrize("value", ["alice", "alice:", ":pw", "alice:pw,bob"])
def test_malformed_pairs_are_config_errors(value):
    with pytest.raises(ConfigError, match="user:password"):
        parse_auth(value)


def test_bad_line_in_users_file_names_the_line(tmp_path):
    users = tmp_path / "users.txt"
    users.write_text("alice:one\nbob\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"users.txt:2"):
        parse_auth(str(users))


def test_missing_users_file(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        parse_auth(str(tmp_path / "nope" / "users"))
