"""What the route modules share: the API prefix, the job-id and node-name path parameters, and
errors in FastAPI's shape (a 422 naming the field, a 404 ``no <what>``, the validation-error handler
that survives inputs JSON cannot encode: NaN, Infinity)."""

from __future__ import annotations

import math
from typing import Annotated, Any

from fastapi import HTTPException, Path as PathParam, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from quasched.service.runtime.schemas import MAX_ID

API = "/api/v1"
JobId = Annotated[int, PathParam(ge=0, le=MAX_ID, description="Job id.")]
#: longest input or message an error echoes, and most errors in one reply
ECHO_MAX = 200
ERRORS_MAX = 20
NodeName = Annotated[str, PathParam(min_length=1, max_length=253, description="Node name.")]


def field_error(field: str, message: str, code: int = status.HTTP_422_UNPROCESSABLE_CONTENT,
                where: str = "body") -> HTTPException:
    """An error in FastAPI's shape naming ``field`` (``{"detail": [{"loc": [where, field], "msg": ...}]}``)."""
    loc = [int(part) if part.isdigit() else part for part in field.split(".")]
    return HTTPException(code, [{"loc": [where, *loc], "msg": message, "type": "value_error"}])


def not_found(what: str) -> HTTPException:
    """A 404 saying ``no <what>``."""
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no {what}")


def _safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings and anything else JSON cannot hold as text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _short(text: str) -> str:
    """``text`` cut to :data:`ECHO_MAX` characters (an error never echoes a large input)."""
    return text if len(text) <= ECHO_MAX else text[:ECHO_MAX] + "…"


def _error(err: dict[str, Any]) -> dict[str, Any]:
    """One validation error for the reply: the message without pydantic's "Value error, " prefix and cut short,
    the input only when it is short."""
    out = {k: _safe(v) for k, v in err.items() if k not in ("url", "input", "ctx")}
    out["msg"] = _short(str(err.get("msg", "")).removeprefix("Value error, "))
    if "input" in err and len(repr(err["input"])) <= ECHO_MAX:
        out["input"] = _safe(err["input"])
    return out


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, safe for inputs JSON cannot encode (NaN, Infinity), never echoing a large input."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    return JSONResponse(jsonable_encoder({"detail": [_error(err) for err in errors[:ERRORS_MAX]]}), status_code=422)
