"""Kubernetes ``Status`` error bodies, shaped exactly as the real API server sends them.

Every failure the emulator reports is an :class:`ApiError` carrying a Status dict; the HTTP
layer serialises it with the Status ``code`` as the HTTP status. Messages copy the upstream
wording (k8s.io/apimachinery/pkg/api/errors) because clients and tests match on them.
"""
from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class ApiError(Exception):
    """A request failure that becomes a ``Status`` response; ``status`` is the body."""

    def __init__(self, status: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        super().__init__(status.get("message", ""))
        self.status = status
        self.headers = headers or {}

    @property
    def code(self) -> int:
        return int(self.status["code"])


def status_body(
    code: int,
    message: str,
    reason: str | None = None,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A Failure Status; ``reason`` defaults to the upstream reason for ``code``."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    reason = reason if reason is not None else _REASONS.get(code, "")
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success_status(code: int = 200) -> dict[str, Any]:
    """The Success Status returned by eviction (201) and some deletes."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code}


def qualified(resource: str, group: str) -> str:
    """``pods`` or ``poddisruptionbudgets.policy``: how upstream names a resource in messages."""
    return f"{resource}.{group}" if group else resource


def _details(resource: str, group: str, name: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    return details


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status_body(
            404, f'{qualified(resource, group)} "{name}" not found', details=_details(resource, group, name)
        )
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        status_body(
            409,
            f'{qualified(resource, group)} "{name}" already exists',
            reason="AlreadyExists",
            details=_details(resource, group, name),
        )
    )


def conflict(resource: str, group: str, name: str, why: str | None = None) -> ApiError:
    why = why or "the object has been modified; please apply your changes to the latest version and try again"
    return ApiError(
        status_body(
            409,
            f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}',
            details=_details(resource, group, name),
        )
    )


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid; each cause is ``{"reason", "message", "field"}`` like upstream field errors."""
    summary = ", ".join(f"{c['field']}: {c['message']}" for c in causes)
    details: dict[str, Any] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = causes
    return ApiError(status_body(422, f'{qualified(kind, group)} "{name}" is invalid: {summary}', details=details))


def bad_request(message: str) -> ApiError:
    return ApiError(status_body(400, message))


def unprocessable(message: str) -> ApiError:
    """422 from a JSON patch that does not apply (failing ``test``, missing path)."""
    return ApiError(
        status_body(
            422,
            "the server rejected our request due to an error in our request",
            details={"causes": [{"reason": "UnexpectedServerResponse", "message": message}]},
        )
    )


def method_not_allowed() -> ApiError:
    return ApiError(status_body(405, "the server does not allow this method on the requested resource"))


def unsupported_media(accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        status_body(
            415,
            "the body of the request was in an unknown format - accepted media types include: "
            + ", ".join(accepted),
        )
    )


def path_not_found() -> ApiError:
    return ApiError(status_body(404, "the server could not find the requested resource", details={}))


def unauthorized() -> ApiError:
    return ApiError(status_body(401, "Unauthorized"))


def gone(message: str) -> ApiError:
    return ApiError(status_body(410, message))


def too_many_requests(message: str, causes: list[dict[str, str]], retry_after: int = 0) -> ApiError:
    """429 as ``errors.NewTooManyRequests``: Retry-After only when the server suggests one."""
    details: dict[str, Any] = {"causes": causes}
    headers = {}
    if retry_after > 0:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(status_body(429, message, details=details), headers)


def forbidden(resource: str, group: str, name: str, why: str) -> ApiError:
    return ApiError(
        status_body(
            403,
            f'{qualified(resource, group)} "{name}" is forbidden: {why}',
            details=_details(resource, group, name),
        )
    )
