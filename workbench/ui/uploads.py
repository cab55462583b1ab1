"""Which files a browser may hand the workbench: only files Gradio itself received in this server's upload folder.

A file component's value comes from the client as a FileData whose ``path`` the client
writes. Gradio checks that the path lies in its upload folder only for apps started with
``launch()``; a mounted app, as the workbench is, skips that check (``Blocks.has_launched``
stays false), so a caller could name ``/etc/passwd``, the workbench database or the
``WORKBENCH_AUTH`` file and read it back through the preview or the import. Every handler
that takes a file from the client passes it through ``received_file`` first; the server also
switches Gradio's own check on (``workbench.server``), so there are two locks on this door.
Either refusal names only the path the caller sent (``not_uploaded``): never the upload folder,
the database or the password file, which the caller has no business learning.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from workbench.errors import Forbidden


def upload_folder() -> Path:
    """Where Gradio stores what browsers upload (``GRADIO_TEMP_DIR``, else ``<tmp>/gradio``), resolved."""
    from gradio.utils import get_upload_folder

    return Path(os.path.realpath(get_upload_folder()))


def _path_of(value: Any) -> Optional[str]:
    if value is None or isinstance(value, (str, os.PathLike)):
        return os.fspath(value) if value is not None else None
    if isinstance(value, dict):
        return value.get("path")
    return getattr(value, "path", None)


def not_uploaded(raw: Any, what: str = "file") -> Forbidden:
    """The refusal of a file the browser did not upload: it names what was sent, nothing of the server."""
    sent = str(raw)
    if len(sent) > 120:
        sent = sent[:60] + "…" + sent[-59:]
    return Forbidden(f"the {what} {sent!r} was not uploaded through this page; choose it again with the upload box")


def sent_paths(value: Any) -> list[str]:
    """The ``path`` of every file object (a dict with one) in a request's input, in order."""
    found, todo = [], [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            if isinstance(item.get("path"), str):
                found.append(item["path"])
            todo.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            todo.extend(reversed(item))
    return found


def received_file(value: Any, what: str = "file", folder: Optional[Path] = None) -> Optional[Path]:
    """The real path of an uploaded file, or None when nothing was given.

    Raises ``Forbidden`` unless the path, with links and ``..`` resolved, is a regular file
    inside the upload folder: that is, a file this server received from a browser.
    """
    raw = _path_of(value)
    if not raw:
        return None
    root = folder or upload_folder()
    resolved = Path(os.path.realpath(raw))
    if not resolved.is_relative_to(root) or resolved == root or not resolved.is_file():
        raise not_uploaded(raw, what)
    return resolved
