"""The ``workbench`` command line. Thin: parse options, call a service, print.

Errors from the services (``workbench.errors``) are translated here, in one
place: one line per problem on stderr and a non-zero exit code, never a traceback.
Every command that takes the id of a run, an audit or a sweep declares it with ``id_argument``,
so an id that cannot exist (``abc``, ``0``, ``100000000000000000000``) is "not found" (exit 3)
before any query is made.
"""
from __future__ import annotations

import functools
import json
import logging
import re
import sys
from typing import Any, Optional

import click
import typer
from sqlalchemy.exc import SQLAlchemyError

from storage.db import describe_error
from storage.exiting import exit_process
from workbench.errors import DataValidationError, NotFound, StorageError, WorkbenchError

log = logging.getLogger(__name__)

app = typer.Typer(help="BERT Workbench: fine-tune BERT-family encoders without writing code.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
data_app = typer.Typer(help="Validate, import and list datasets.", no_args_is_help=True)
runs_app = typer.Typer(help="List, inspect, cancel and retry runs.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(runs_app, name="runs")


MAX_ID = 2**63 - 1  # the largest id a database row can have (a signed 64-bit INTEGER / BIGINT)


def parse_id(kind: str, value: str) -> int:
    """``value`` as the id of a ``kind`` (``run``, ``audit``, ``sweep``); ``NotFound`` unless it is a whole
    number from 1 to ``MAX_ID``: no such row can exist, and a larger number would overflow the query."""
    text = str(value).strip()
    number = int(text) if text.isascii() and text.isdigit() else 0
    if not 1 <= number <= MAX_ID:
        raise NotFound(f"{kind} {value!r} does not exist: {kind} ids are whole numbers from 1 to {MAX_ID}")
    return number


def id_argument(kind: str, help: str = "") -> Any:
    """The typer argument of a command that takes the id of a ``kind``, checked by ``parse_id``."""
    return typer.Argument(..., parser=functools.partial(parse_id, kind), metavar="ID",
                          help=help or f"The {kind} id.")


NEGATIVE_NUMBER = re.compile(r"-\d")  # no option of this CLI is a dash and a digit


def negative_id(exc: Exception, argv: list[str]) -> Optional[NotFound]:
    """The ``NotFound`` of ``runs show -1``'s id, or None.

    Click reads ``-1`` as an unknown option, a usage error (exit 2); but where the command takes an id,
    ``-1`` is an id that cannot exist, which the CLI contract answers with exit 3 as for ``0`` or ``abc``.
    """
    option = getattr(exc, "option_name", None) or ""
    command = getattr(getattr(exc, "ctx", None), "command", None)
    if not NEGATIVE_NUMBER.match(option) or command is None:
        return None
    token = next((arg for arg in argv if arg.startswith(option)), option)
    for param in getattr(command, "params", ()):
        info = getattr(getattr(param, "type_descriptor", None), "parameter_info", None)
        parser = getattr(info, "parser", None)
        if isinstance(parser, functools.partial) and parser.func is parse_id:
            try:
                parser(token)
            except NotFound as found:
                return found
    return None


def emit(payload: Any, as_json: bool, text: str | None = None) -> None:
    """Print ``payload`` as JSON, or ``text`` for people."""
    if as_json:
        typer.echo(json.dumps(payload, indent=2, default=str))
    else:
        typer.echo(text if text is not None else str(payload))


def report_error(exc: WorkbenchError) -> int:
    if isinstance(exc, DataValidationError):
        # Exactly one line per problem: scripts count and parse these lines.
        for problem in exc.problems:
            typer.echo(str(problem), err=True)
    else:
        typer.echo(f"error: {exc}", err=True)
        hint = getattr(exc, "hint", "")
        if hint:
            typer.echo(f"hint: {hint}", err=True)
    return exc.exit_code


def main(argv: Optional[list[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=sys.stderr)
    for noisy in ("httpx", "urllib3", "filelock", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    # Import the command modules so they register on ``app``.
    from workbench import commands  # noqa: F401

    try:
        code = app(args=argv, standalone_mode=False)
    except (click.exceptions.Exit, typer.Exit) as exc:
        code = exc.exit_code
    except (click.ClickException, typer.TyperException) as exc:
        # typer >= 0.29 raises its own copy of click's exceptions (an unknown option, a bad value), not click's.
        not_found = negative_id(exc, list(sys.argv[1:] if argv is None else argv))
        if not_found is not None:
            code = report_error(not_found)
        else:
            exc.show()
            code = exc.exit_code
    except (click.exceptions.Abort, typer.Abort):
        typer.echo("aborted", err=True)
        code = 130
    except WorkbenchError as exc:
        code = report_error(exc)
    except SQLAlchemyError as exc:
        # A query failed in a way no service expected (the database locked past the timeout, the server gone):
        # still one line for the user; the traceback only for whoever turns on debug logging.
        log.debug("database error", exc_info=True)
        code = report_error(StorageError(f"the database failed: {describe_error(exc)}",
                                         "try again; if it keeps failing, check the database server or file"))
    except KeyboardInterrupt:
        code = 130
    sys.exit(code if isinstance(code, int) else 0)


def entry() -> None:
    """The `workbench` command: ``main``, then the end of its process without the interpreter's last garbage sweep
    (``storage.exiting``). ``main`` itself only raises SystemExit: called in a process that goes on (a test), it
    must not freeze that process's objects."""
    try:
        main()
    except SystemExit as done:
        exit_process(done.code)

