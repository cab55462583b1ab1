"""The model catalogue: local sizes, download flags, and a clear error offline."""

import pytest

from jobs.training import catalogue
from workbench.errors import ModelUnavailable


def test_packaged_default_is_local_with_sizes_from_its_config():
    info = catalogue.resolve_model("all-MiniLM-L6-v2")
    assert info.available_locally and not info.needs_download
    assert (info.layers, info.hidden, info.heads) == (6, 384, 12)
    assert 22_000_000 < info.parameters < 23_500_000


def test_catalogue_lists_the_documented_models():
    names = {m.name for m in catalogue.list_models()}
    assert {"bert-base-uncased", "bert-base-cased", "bert-large-uncased", "bert-large-cased", "roberta-base",
            "roberta-large", "albert-xxlarge-v2", "distilbert-base-uncased", "all-MiniLM-L6-v2"} <= names
    roberta = next(m for m in catalogue.list_models() if m.name == "roberta-base")
    assert roberta.layers == 12 and roberta.parameters > 100_000_000


def test_absent_model_offline_fails_at_once(monkeypatch):
    """At once: without trying the network (a wall-clock bound here failed on a loaded machine, and a
    connection attempt is what would make it slow)."""
    import socket

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tried: list = []
    monkeypatch.setattr(socket.socket, "connect", lambda self, address: tried.append(address))
    with pytest.raises(ModelUnavailable, match="offline"):
        catalogue.resolve_model("someone/not-a-cached-model")
    assert tried == []


def test_local_folder(tmp_path):
    from tests.tiny_models import tiny_bert

    folder = tiny_bert(tmp_path / "tiny")
    info = catalogue.resolve_model(str(folder))
    assert info.available_locally and info.layers == 2 and info.hidden == 32
    assert catalogue.load_path(info) == str(folder.resolve())
    with pytest.raises(ModelUnavailable):
        catalogue.resolve_model(str(tmp_path))  # a folder without config.json


def test_estimate_grows_with_work():
    small = catalogue.estimate_training(22_700_000, 30, 2000, 1)
    assert catalogue.estimate_training(22_700_000, 30, 4000, 1)["seconds"] > small["seconds"] > 0
