"""Which files a browser may hand the workbench: only files Gradio itself received in this server's upload folder.

A file component's value comes from the client as a FileData whose ``path`` the client
writes. Gradio checks that the path lies in its upload folder only for apps started with
``launch()``; a mounted app, as the workbench is, skips that check (``Blocks.has_launched``
stays false), so a caller could name ``/etc/passwd``, the workbench database or the
``WORKBENCH_AUTH`` file and read it back through the preview or the import. Every handler
that takes a file from the client passes it through ``received_file`` first; the server also
switches Gradio's own check on (``workbench.server``), so there are two locks on this door.
Gradio's check cannot see a hard link in its folder; ``received_file`` refuses those as well.
Every refusal names only the path the caller sent (``not_uploaded``, ``hard_linked``): never the
upload folder, the database or the password file, which the caller has no business learning.
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
    return Forbidden(f"the {what} {_shown(raw)!r} was not uploaded through this page; choose it again with the upload box")


def _shown(raw: Any) -> str:
    sent = str(raw)
    return sent[:60] + "…" + sent[-59:] if len(sent) > 120 else sent


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
    inside the upload folder: that is, a file this server received from a browser. A file there
    with more than one name (``st_nlink > 1``) is refused too: Gradio writes each upload as a new
    file, so a second name is a hard link someone with write access to the folder made, and
    through it any file of theirs on the same file system (the database, a users file) would
    read as an upload, which resolving symbolic links cannot catch.
    """
    raw = _path_of(value)
    if not raw:
        return None
    root = folder or upload_folder()
    resolved = Path(os.path.realpath(raw))
    if not resolved.is_relative_to(root) or resolved == root or not resolved.is_file():
        raise not_uploaded(raw, what)
    if resolved.stat().st_nlink > 1:
        raise hard_linked(raw, what)
    return resolved


def hard_linked(raw: Any, what: str = "file") -> Forbidden:
    """The refusal of a file in the upload folder that has another name too: it names what was sent, nothing else."""
    return Forbidden(f"the {what} {_shown(raw)!r} is a hard link (it has another name on the server), so it is not "
                     "a file this page received; choose the file again with the upload box")
