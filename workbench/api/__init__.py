"""The REST API under ``/api/v1`` (docs/api.md): every flow of the workbench for scripts and notebooks, over the
same services as the UI and the CLI; its OpenAPI document and an offline docs page.

May use: ``workbench.services`` (and the playground service, the train and sweep commands' spec builders on this
floor); never ``jobs``. ``mount_api(app, wb)`` puts it on the server's FastAPI app, before the UI's mount at ``/``.
"""
from __future__ import annotations

from typing import Any

from storage.context import Workbench

__all__ = ["build_api", "mount_api"]


def build_api(wb: Workbench):
    """The ``Api`` (router and rules) of every route, the fallback last."""
    from workbench.api import datasets, docs, labelling, playgrounds, runs, work
    from workbench.api.fallback import add_fallback
    from workbench.api.routing import Api

    api = Api(wb)
    for module in (datasets, runs, work, playgrounds, labelling, docs):
        module.add_routes(api)
    add_fallback(api)
    return api


def mount_api(app: Any, wb: Workbench):
    """Register ``/api/v1`` on ``app``. Its fallback answers JSON 404/405 to any other path under ``/api/v1``
    except ``/api/v1/predict/...``, which stays the playgrounds' (``workbench.playground.api``), wherever that
    router is registered."""
    api = build_api(wb)
    app.include_router(api.router)
    return api
