"""The UI's error edge: a user's mistake becomes a ``gr.Error`` and one log line, never a server traceback.

Gradio prints the full traceback of every exception an event handler raises, ``gr.Error``
included, unless that error was created with ``print_exception=False``. Rather than remember
the flag at each ``raise``, ``quiet_user_errors`` wraps every handler of a finished ``Blocks``
once: a ``gr.Error`` or a ``WorkbenchError`` is logged as one WARNING line under the handler's
module and re-raised without a traceback. Any other exception is a bug and keeps its traceback.
The log line keeps the whole message; the browser gets it without the CLI hints the services add
for the terminal (``ui_message``): a command line is no help in a web page.

Gradio also refuses some input before a handler runs: a value a dropdown does not offer, or a
file path the browser did not upload. Its own message for a forged path names the upload folder
or every blocked path (the database, the password file), and it prints a traceback each time, so
``quiet_user_errors`` wraps that step too: the refusal is one WARNING line, and a forged path is
answered with ``uploads.not_uploaded``, which names only what the caller sent.
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

import gradio as gr
from gradio.exceptions import InvalidPathError

from workbench.errors import WorkbenchError
from workbench.ui.format import ui_message
from workbench.ui.uploads import not_uploaded, received_file, sent_paths


def _action(fn: Callable) -> str:
    name = getattr(fn, "__name__", "")
    return name.removeprefix("on_") if name.isidentifier() else "request"


def guard(fn: Callable) -> Callable:
    """``fn`` with user errors logged in one line and shown without a server traceback."""
    log = logging.getLogger(getattr(fn, "__module__", None) or __name__)
    action = _action(fn)

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except gr.Error as exc:
            log.warning("%s refused: %s", action, " ".join(str(exc.message).split()))
            exc.print_exception = False
            exc.message = ui_message(exc.message)
            raise
        except WorkbenchError as exc:
            log.warning("%s refused: %s", action, " ".join(str(exc).split()))
            raise gr.Error(ui_message(exc), print_exception=False) from None

    return guarded


def _forged_path(inputs: Any) -> str:
    """Why Gradio refused a path in ``inputs``, naming the first one that is not an upload."""
    for path in sent_paths(inputs):
        try:
            received_file(path)
        except WorkbenchError as exc:
            return str(exc)
    return "a file given to this page was not uploaded through it; choose it again with the upload box"


def _quiet_preprocessing(blocks: gr.Blocks) -> None:
    """Refusals of Gradio's input checks as one WARNING line, and a forged path as a message that reveals no
    server path."""
    preprocess_data = blocks.preprocess_data

    @functools.wraps(preprocess_data)
    async def checked(block_fn: Any, inputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        fn = getattr(block_fn, "fn", None)
        log = logging.getLogger(getattr(fn, "__module__", None) or __name__)
        try:
            return await preprocess_data(block_fn, inputs, *args, **kwargs)
        except InvalidPathError:
            message = _forged_path(inputs)
            log.warning("%s refused: %s", _action(fn), message)
            raise gr.Error(message, print_exception=False) from None
        except gr.Error as exc:
            log.warning("%s refused: %s", _action(fn), " ".join(str(exc.message).split()))
            exc.print_exception = False
            raise

    blocks.preprocess_data = checked


def quiet_user_errors(blocks: gr.Blocks) -> gr.Blocks:
    """Guard every plain (not generator, not async) event handler of ``blocks`` and Gradio's checks of
    their input; returns ``blocks``."""
    _quiet_preprocessing(blocks)
    for block_fn in blocks.fns.values():
        fn = block_fn.fn
        if fn is None or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) \
                or inspect.isasyncgenfunction(fn):
            continue
        block_fn.fn = guard(fn)
    return blocks
