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
answered with ``uploads.not_uploaded``, which names only what the caller sent. Input no page sends —
fewer values than the function takes, a value that is not a valid ``FileData``, a call of a function
that runs only in the browser — is refused there as well, in one line naming the function and what
was wrong (Gradio printed a traceback for each, and answered with its components' reprs).

Anyone can send such calls to a public playground, as fast as they like, so the lines are rate-limited
(``RefusalLog``): at most ``REFUSAL_LINES_PER_MINUTE`` of each kind a minute for each page (the
workbench, each playground), then one line saying the rest are counted, and with the next refusal
after that minute one line with the count of those not logged.
"""
from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import threading
import time
from typing import Any, Callable, Optional

import gradio as gr
from gradio.exceptions import InvalidPathError

from workbench.errors import WorkbenchError
from workbench.ui.format import ui_message
from workbench.ui.uploads import not_uploaded, received_file, sent_paths


REFUSAL_LINES_PER_MINUTE = 20  # per kind and page: a person's mistakes fit, a flood does not
WINDOW_S = 60.0
# The kinds of refusal, each counted on its own: a flood of one leaves the others' lines alone.
HANDLER, FILE = "refusals", "refused files"
MALFORMED, TOO_FEW, BROWSER_ONLY = "malformed values", "calls with too few values", "calls of browser-only functions"


class RefusalLog:
    """WARNING lines for refused requests, at most ``per_minute`` of each kind in a ``WINDOW_S`` window.

    Past the limit, one line says that the rest of the window's are counted, not logged; the first refusal
    of that kind after the window logs how many were not, then its own line. The clock is injectable."""

    def __init__(self, per_minute: int = REFUSAL_LINES_PER_MINUTE, clock: Callable[[], float] = time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._lock = threading.Lock()
        self._windows: dict[str, tuple[float, int, int]] = {}  # kind: (window start, lines logged, lines dropped)

    def warning(self, log: logging.Logger, kind: str, message: str, *args: Any) -> None:
        now = self.clock()
        lines: list[tuple[str, tuple]] = []
        with self._lock:
            start, logged, dropped = self._windows.get(kind, (now, 0, 0))
            if now - start >= WINDOW_S:
                if dropped:
                    lines.append(("%d %s were not logged in the last minute (at most %d a minute are)",
                                  (dropped, kind, self.per_minute)))
                start, logged, dropped = now, 0, 0
            if logged < self.per_minute:
                logged += 1
                lines.append((message, args))
            else:
                dropped += 1
                if dropped == 1:
                    lines.append(("more than %d %s in a minute: the rest of this minute's are counted, not logged",
                                  (self.per_minute, kind)))
            self._windows[kind] = (start, logged, dropped)
        for line, line_args in lines:
            log.warning(line, *line_args)


def _action(fn: Callable) -> str:
    name = getattr(fn, "__name__", "")
    return name.removeprefix("on_") if name.isidentifier() else "request"


Authorizer = Callable[[Callable, tuple, dict], Any]


def guard(fn: Callable, refusals: Optional[RefusalLog] = None, authorize: Optional[Authorizer] = None) -> Callable:
    """``fn`` with user errors logged in one line (through ``refusals``, rate-limited) and shown without a
    server traceback. With ``authorize``, each call is first authorized (``authorize(fn, args, kwargs)``
    raises ``SignInRequired`` or ``AccessDenied``): a refused call never reaches ``fn``."""
    log = logging.getLogger(getattr(fn, "__module__", None) or __name__)
    action = _action(fn)
    refusals = refusals or RefusalLog()

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            if authorize is not None:
                authorize(fn, args, kwargs)
            return fn(*args, **kwargs)

        try:
            # In a context of its own: who the call acts as (set by ``authorize``) ends with the call.
            return contextvars.copy_context().run(call)
        except gr.Error as exc:
            refusals.warning(log, HANDLER, "%s refused: %s", action, " ".join(str(exc.message).split()))
            exc.print_exception = False
            exc.message = ui_message(exc.message)
            raise
        except WorkbenchError as exc:
            refusals.warning(log, HANDLER, "%s refused: %s", action, " ".join(str(exc).split()))
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


def _malformed(block_fn: Any, inputs: list[Any], exc: ValueError) -> tuple[str, str]:
    """(kind, what was wrong) for a call Gradio's checks refused, in words that name no server object."""
    wanted = len(getattr(block_fn, "inputs", None) or [])
    if len(inputs) < wanted:
        return TOO_FEW, f"it sent {len(inputs)} input values where the function takes {wanted}"
    errors = getattr(exc, "errors", None)  # pydantic's ValidationError: a FileData (or other model) that is not one
    if callable(errors):
        first = (errors() or [{}])[0]
        where = ".".join(str(part) for part in first.get("loc", ())) or "value"
        return MALFORMED, f"a {getattr(exc, 'title', 'value')} is malformed ({where}: {first.get('msg', 'invalid')})"[:300]
    return MALFORMED, f"a value is malformed: {' '.join(str(exc).split())}"[:300]


def _quiet_preprocessing(blocks: gr.Blocks, refusals: RefusalLog) -> None:
    """Refusals of Gradio's input checks as one WARNING line, a forged path as a message that reveals no
    server path, and a malformed call (see the module doc) as a short message instead of a traceback."""
    preprocess_data = blocks.preprocess_data

    @functools.wraps(preprocess_data)
    async def checked(block_fn: Any, inputs: list[Any], *args: Any, **kwargs: Any) -> Any:
        fn = getattr(block_fn, "fn", None)
        log = logging.getLogger(getattr(fn, "__module__", None) or __name__)
        if fn is None:  # its page runs it in the browser; only a forged call reaches the server
            message = "this function runs in the browser; it has no server side to call"
            refusals.warning(log, BROWSER_ONLY, "%s refused: %s", _action(fn), message)
            raise gr.Error(message, print_exception=False)
        try:
            return await preprocess_data(block_fn, inputs, *args, **kwargs)
        except InvalidPathError:
            message = _forged_path(inputs)
            refusals.warning(log, FILE, "%s refused: %s", _action(fn), message)
            raise gr.Error(message, print_exception=False) from None
        except gr.Error as exc:
            refusals.warning(log, HANDLER, "%s refused: %s", _action(fn), " ".join(str(exc.message).split()))
            exc.print_exception = False
            raise
        except ValueError as exc:  # the values came from the client (a page never sends these); not a bug here
            kind, message = _malformed(block_fn, inputs, exc)
            refusals.warning(log, kind, "%s refused: %s", _action(fn), message)
            raise gr.Error(f"this call was refused: {message}", print_exception=False) from None

    blocks.preprocess_data = checked


def _authorized(fn: Callable, refusals: RefusalLog, authorize: Authorizer) -> Callable:
    """A generator or async handler ``fn`` that is first authorized, a refusal logged as ``guard`` logs it."""
    log = logging.getLogger(getattr(fn, "__module__", None) or __name__)

    def check(args: tuple, kwargs: dict) -> None:
        try:
            authorize(fn, args, kwargs)
        except WorkbenchError as exc:
            refusals.warning(log, HANDLER, "%s refused: %s", _action(fn), " ".join(str(exc).split()))
            raise gr.Error(ui_message(exc), print_exception=False) from None

    if inspect.isasyncgenfunction(fn):
        @functools.wraps(fn)
        async def agen(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            async for item in fn(*args, **kwargs):
                yield item
        return agen
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def gen(*args: Any, **kwargs: Any) -> Any:
            check(args, kwargs)
            yield from fn(*args, **kwargs)
        return gen

    @functools.wraps(fn)
    async def coroutine(*args: Any, **kwargs: Any) -> Any:
        check(args, kwargs)
        return await fn(*args, **kwargs)
    return coroutine


def quiet_user_errors(blocks: gr.Blocks, refusals: Optional[RefusalLog] = None,
                      authorize: Optional[Authorizer] = None) -> gr.Blocks:
    """Guard every plain (not generator, not async) event handler of ``blocks`` and Gradio's checks of
    their input, their lines counted by ``refusals`` (by default a ``RefusalLog`` of this page's own);
    returns ``blocks``. With ``authorize`` (``workbench.ui.access``), every handler, whatever its kind, is
    authorized before it runs."""
    refusals = refusals or RefusalLog()
    _quiet_preprocessing(blocks, refusals)
    for block_fn in blocks.fns.values():
        fn = block_fn.fn
        if fn is None:
            continue
        if inspect.iscoroutinefunction(fn) or inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
            if authorize is not None:
                block_fn.fn = _authorized(fn, refusals, authorize)
            continue
        block_fn.fn = guard(fn, refusals, authorize)
    return blocks
