"""Typed errors shared by the library and rendered once per protocol (HTTP shape or gRPC status).

Each maps to one gRPC status code and one HTTP status; services translate, never re-classify.
"""


class ClawgymError(Exception):
    """Base of all clawgym errors the services render for their callers."""

    grpc_code = "INTERNAL"
    http_status = 500


class InvalidArgument(ClawgymError):
    """The caller sent something malformed (bad array, unknown field value, oversized body)."""

    grpc_code = "INVALID_ARGUMENT"
    http_status = 400


class NotFound(ClawgymError):
    """The named run, rollout, group or token does not exist."""

    grpc_code = "NOT_FOUND"
    http_status = 404


class AlreadyExists(ClawgymError):
    """The record exists already (e.g. a call with the same rollout and seq)."""

    grpc_code = "ALREADY_EXISTS"
    http_status = 409


class Unauthenticated(ClawgymError):
    """Unknown or finished rollout token."""

    grpc_code = "UNAUTHENTICATED"
    http_status = 401


class PermissionDenied(ClawgymError):
    """The caller is known but may not do this (e.g. load weights from outside the checkpoint root)."""

    grpc_code = "PERMISSION_DENIED"
    http_status = 403


class Unavailable(ClawgymError):
    """The engine is down or reloading; retry later."""

    grpc_code = "UNAVAILABLE"
    http_status = 503


class FailedPrecondition(ClawgymError):
    """The request is valid but the state forbids it (e.g. a checkpoint that does not fit the model)."""

    grpc_code = "FAILED_PRECONDITION"
    http_status = 409
