"""Reading a request's body after its actor was checked: JSON within the spec limits, uploads into a temporary
folder under the workbench home (removed when the route is done; the services keep their own copies)."""
from __future__ import annotations

import contextlib
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, AsyncIterator, Optional

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from storage.context import Workbench
from workbench.api.errors import ApiError
from workbench.errors import ConfigError
from workbench.services.specs import load_json

MAX_JSON_BYTES = 64 * 1024  # a run or sweep spec is a page of settings (jobs.specs.files.MAX_SPEC_BYTES)
MAX_FORM_FIELDS = 40


async def read_limited(request: Request, limit: int) -> bytes:
    """The body, read no further than ``limit`` bytes (413 past that)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the request body has {int(declared):,} bytes; this route reads at most {limit:,}", 413)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(f"the request body is longer than {limit:,} bytes", 413)
        chunks.append(chunk)
    return b"".join(chunks)


async def json_object(request: Request, what: str = "the request body") -> dict[str, Any]:
    """The body as a JSON object (ConfigError, 422, for anything else)."""
    raw = await read_limited(request, MAX_JSON_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    if not text.strip():
        raise ConfigError(f"{what} is empty; send a JSON object")
    value = load_json(text, what)
    if not isinstance(value, dict):
        raise ConfigError(f"{what} must be a JSON object ({{...}}), not {type(value).__name__}")
    return value


def only_keys(body: dict[str, Any], allowed: tuple[str, ...], what: str = "the request body") -> None:
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise ConfigError(f"{what} has an unknown key {unknown[0]!r}; the keys are {', '.join(allowed)}")


class Upload:
    """A multipart form whose files were saved under ``folder`` with their own (cleaned) names."""

    def __init__(self, form: FormData, folder: Path):
        self.form, self.folder = form, folder
        self.names: dict[str, str] = {}

    def text(self, field: str, default: Optional[str] = None) -> Optional[str]:
        value = self.form.get(field)
        if isinstance(value, UploadFile):
            raise ConfigError(f"form field {field!r} is a text field, not a file")
        value = (value or "").strip() if value is not None else None
        return value or default

    def number(self, field: str, kind: type, default: Any = None) -> Any:
        value = self.text(field)
        if value is None:
            return default
        try:
            return kind(value)
        except ValueError:
            raise ConfigError(f"form field {field!r} must be a {'whole ' if kind is int else ''}number, "
                              f"not {value!r}") from None

    def flag(self, field: str) -> bool:
        value = (self.text(field) or "false").lower()
        if value not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
            raise ConfigError(f"form field {field!r} is true or false, not {value!r}")
        return value in ("true", "1", "yes", "on")

    def required(self, field: str) -> str:
        value = self.text(field)
        if value is None:
            raise ConfigError(f"form field {field!r} is missing")
        return value

    def file(self, field: str, required: bool = True) -> Optional[Path]:
        """The uploaded file of ``field``, saved under its own name (None when optional and absent)."""
        value = self.form.get(field)
        if value is None or (isinstance(value, UploadFile) and not value.filename and not value.size):
            if required:
                raise ConfigError(f"the form has no file {field!r}; send it as multipart/form-data "
                                  f"(httpx: files={{{field!r}: open(path, 'rb')}})")
            return None
        if not isinstance(value, UploadFile):
            raise ConfigError(f"form field {field!r} must be a file, not text")
        name = _clean_name(value.filename or field)
        target = self.folder / field / name
        target.parent.mkdir(parents=True, exist_ok=True)
        value.file.seek(0)
        with target.open("wb") as out:
            shutil.copyfileobj(value.file, out, 1024 * 1024)
        self.names[field] = name
        return target


def _clean_name(filename: str) -> str:
    """A file name without any folder part, safe on every file system, that keeps its extension."""
    name = Path(filename.replace("\\", "/")).name
    name = re.sub(r"[^\w.\- ]+", "_", name).strip(" .")
    return name[:120] or "upload"


@contextlib.asynccontextmanager
async def upload(wb: Workbench, request: Request) -> AsyncIterator[Upload]:
    """The multipart form of ``request`` (at most the upload limit of the settings), its files saved in a
    temporary folder under the home that is removed afterwards."""
    content_type = request.headers.get("content-type", "")
    if not content_type.lower().startswith("multipart/form-data"):
        raise ApiError("send this as multipart/form-data (a file and form fields), not "
                       f"{content_type.split(';')[0] or 'a body without a content type'}", 415)
    limit = wb.settings.max_upload_mb * 10**6 + 1024 * 1024  # the file plus the form's own bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(f"the upload has {int(declared):,} bytes; the limit is {wb.settings.max_upload_mb} MB "
                       "(WORKBENCH_MAX_UPLOAD_MB)", 413)
    try:
        form = await request.form(max_files=4, max_fields=MAX_FORM_FIELDS)
    except HTTPException as exc:
        raise ConfigError(f"the multipart form cannot be read: {exc.detail}") from None
    wb.settings.home.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=".api-upload-", dir=wb.settings.home))
    try:
        yield Upload(form, folder)
    finally:
        await form.close()
        shutil.rmtree(folder, ignore_errors=True)
