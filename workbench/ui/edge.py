"""The UI's error edge: a user's mistake becomes a ``gr.Error`` and one log line, never a server traceback.

Gradio prints the full traceback of every exception an event handler raises, ``gr.Error``
included, unless that error was created with ``print_exception=False``. Rather than remember
the flag at each ``raise``, ``quiet_user_errors`` wraps every handler of a finished ``Blocks``
once: a ``gr.Error`` or a ``WorkbenchError`` is logged as one WARNING line under the handler's
module and re-raised without a traceback. Any other exception is a bug and keeps its traceback.
The log line keeps the whole message; the browser gets it without the CLI hints the services add
for the terminal (``ui_message``): a command line is no help in a web page.
"""
from __future__ import annotations

import functools
import inspect
import logging
from typing import Any, Callable

import gradio as gr

from workbench.errors import WorkbenchError
from workbench.ui.format import ui_message


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


def quiet_user_errors(blocks: gr.Blocks) -> gr.Blocks:
    """Guard every plain (not generator, not async) event handler of ``blocks``; returns ``blocks``."""
    for block_fn in blocks.fns.values():
        fn = block_fn.fn
        if fn is None or inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) \
                or inspect.isasyncgenfunction(fn):
            continue
        block_fn.fn = guard(fn)
    return blocks
