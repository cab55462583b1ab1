import re

import pytest

from storage.settings import SETTINGS, Settings
from tests.conftest import ROOT
from workbench.errors import ConfigError


def test_every_setting_is_documented_in_the_settings_page():
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    table_rows = [line for line in page.splitlines() if line.startswith("| `WORKBENCH_")]
    documented = {re.match(r"\| `(WORKBENCH_[A-Z_]+)`", row).group(1) for row in table_rows}
    missing = sorted(s.env for s in SETTINGS if s.env not in documented)
    assert not missing, f"settings missing from the table in docs/settings.md: {missing}"
    stale = sorted(documented - {s.env for s in SETTINGS})
    assert not stale, f"docs/settings.md documents settings that do not exist: {stale}"


def test_every_setting_has_help_and_default():
    for setting in SETTINGS:
        assert setting.help.strip(), setting.name
        assert setting.default is not None, setting.name


def test_defaults_and_env(tmp_path):
    s = Settings.from_env({})
    assert s.port == 7860 and s.host == "127.0.0.1" and s.max_jobs == 1
    assert s.home.name == ".workbench"
    assert s.database_url == f"sqlite:///{s.home / 'workbench.db'}"
    s = Settings.from_env({"WORKBENCH_PORT": "9000", "WORKBENCH_HOME": str(tmp_path),
                           "WORKBENCH_OFFLINE": "false", "WORKBENCH_MAX_JOBS": "3"})
    assert (s.port, s.home, s.offline, s.max_jobs) == (9000, tmp_path, False, 3)


def test_invalid_value_names_the_variable():
    with pytest.raises(ConfigError, match="WORKBENCH_PORT"):
        Settings.from_env({"WORKBENCH_PORT": "seventy"})
    with pytest.raises(ConfigError, match="WORKBENCH_MAX_JOBS"):
        Settings.from_env({"WORKBENCH_MAX_JOBS": "0"})
    with pytest.raises(ConfigError, match="WORKBENCH_MAX_ATTEMPTS"):
        Settings.from_env({"WORKBENCH_MAX_ATTEMPTS": "0"})


def test_as_env_round_trips(tmp_path):
    s = Settings.from_env({"WORKBENCH_HOME": str(tmp_path), "WORKBENCH_OFFLINE": "false"})
    assert Settings.from_env(s.as_env()) == s
