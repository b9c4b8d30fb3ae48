"""What every clawgym gRPC service and client share: message limits, typed errors, health, the secret.

Errors: a server renders a `ClawgymError` as its gRPC status (`grpc_code`); a client turns the
status back into the same typed error, so callers cannot tell a remote service from an
in-process one. Health: each service answers the standard `grpc.health.v1.Health` (what
`grpc_health_probe`, Kubernetes `grpc:` probes and load balancers ask) for "" and its own
service name, SERVING once it can do its work and NOT_SERVING from the start of shutdown.
Credentials: every call between services carries the shared secret of the `rpc` section
(`RpcConfig`, `CLAWGYM_RPC__SECRET` or a mounted `secret_file`) as `authorization: Bearer …`
metadata; `open_channel` / `open_aio_channel` attach it to every call of a channel, and the
server's interceptor (`clawgym.rpc_server`) refuses a call without it as UNAUTHENTICATED. The
health service needs none, so probes work.
The serving side of both (server lifecycle, health service, error → status) is `clawgym.rpc_server`.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import Field, SecretStr

from clawgym.errors import (
    AlreadyExists,
    ClawgymError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from clawgym.section import Section

ERRORS_BY_CODE: dict[str, type[ClawgymError]] = {
    cls.grpc_code: cls
    for cls in (
        InvalidArgument, NotFound, AlreadyExists, Unauthenticated, PermissionDenied, Unavailable, FailedPrecondition
    )
}  # fmt: skip
ERRORS_BY_CODE["DEADLINE_EXCEEDED"] = Unavailable

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


# --- credentials --------------------------------------------------------------------------------

SECRET_METADATA_KEY = "authorization"  # gRPC metadata keys are lower case
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"  # open to all: Kubernetes probes carry no secret


class RpcConfig(Section):
    """The `rpc` section: the secret every gRPC call between clawgym services must carry."""

    # excluded from dumps (run folders, the store's run config, ServiceStack's stack.yaml) and
    # masked in reprs, so it is never written or logged
    secret: SecretStr = Field(
        SecretStr(""),
        exclude=True,
        description="shared secret of the gRPC services and their clients; set it by CLAWGYM_RPC__SECRET "
        "or secret_file, not on a command line",
    )
    secret_file: str = Field(
        "", description="a file holding the secret (a mounted Kubernetes Secret); wins over `secret`"
    )

    def shared_secret(self) -> str:
        """The secret (`secret_file`'s content when set); InvalidArgument when none is configured."""
        if self.secret_file:
            try:
                value = Path(self.secret_file).read_text().strip()
            except OSError as e:
                raise InvalidArgument(
                    f"rpc.secret_file: cannot read {self.secret_file}: {e.strerror}"
                ) from None
        else:
            value = self.secret.get_secret_value()
        if not value:
            raise InvalidArgument(
                "rpc.secret is not set: every gRPC service and client needs the shared secret "
                "(CLAWGYM_RPC__SECRET, or rpc.secret_file naming a file that holds it)"
            )
        return value


def secret_metadata(secret: str) -> tuple[str, str]:
    """The metadata entry that carries `secret` (what the server's interceptor compares)."""
    return (SECRET_METADATA_KEY, f"Bearer {secret}")


class _SecretAttacher(
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """Adds the secret to every call of a sync channel."""

    def __init__(self, secret: str) -> None:
        self._entry = secret_metadata(secret)

    def _details(self, details: Any) -> Any:
        return _CallDetails(
            details.method, details.timeout, [*(details.metadata or ()), self._entry],
            details.credentials, details.wait_for_ready, details.compression,
        )  # fmt: skip

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._details(details), request)

    intercept_unary_stream = intercept_unary_unary
    intercept_stream_unary = intercept_unary_unary
    intercept_stream_stream = intercept_unary_unary


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


class _AioSecretAttacher:
    """Adds the secret to every call of an asyncio channel (one subclass per call kind: a grpc.aio
    channel files each interceptor under the first kind it is an instance of)."""

    def __init__(self, secret: str) -> None:
        self._entry = secret_metadata(secret)

    async def _intercept(self, continuation, details, request):
        metadata = grpc.aio.Metadata(*(details.metadata or ()), self._entry)
        return await continuation(details._replace(metadata=metadata), request)


class _AioUnaryUnary(_AioSecretAttacher, grpc.aio.UnaryUnaryClientInterceptor):
    intercept_unary_unary = _AioSecretAttacher._intercept


class _AioUnaryStream(_AioSecretAttacher, grpc.aio.UnaryStreamClientInterceptor):
    intercept_unary_stream = _AioSecretAttacher._intercept


class _AioStreamUnary(_AioSecretAttacher, grpc.aio.StreamUnaryClientInterceptor):
    intercept_stream_unary = _AioSecretAttacher._intercept


class _AioStreamStream(_AioSecretAttacher, grpc.aio.StreamStreamClientInterceptor):
    intercept_stream_stream = _AioSecretAttacher._intercept


def open_channel(target: str, secret: str, options: Sequence[tuple[str, Any]] | None = None) -> grpc.Channel:
    """A sync channel to `target` whose every call carries `secret` (the one way clients attach it)."""
    return grpc.intercept_channel(grpc.insecure_channel(target, options=options), _SecretAttacher(secret))


def open_aio_channel(
    target: str, secret: str, options: Sequence[tuple[str, Any]] | None = None
) -> grpc.aio.Channel:
    """An asyncio channel to `target` whose every call carries `secret`."""
    kinds = (_AioUnaryUnary, _AioUnaryStream, _AioStreamUnary, _AioStreamStream)
    return grpc.aio.insecure_channel(target, options=options, interceptors=[kind(secret) for kind in kinds])


# --- messages, errors, health -------------------------------------------------------------------


def grpc_options(max_message_mb: int) -> list[tuple[str, int]]:
    """Channel/server options shared by client and server: message limits large enough for a group."""
    limit = max_message_mb * 2**20
    return [("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)]


def error_from_rpc(service: str, e: grpc.RpcError) -> ClawgymError:
    """The typed error a gRPC status from `service` stands for; unknown codes are a plain ClawgymError."""
    code = e.code().name if e.code() is not None else "UNKNOWN"  # type: ignore[attr-defined]
    return ERRORS_BY_CODE.get(code, ClawgymError)(f"{service} {code}: {e.details()}")  # type: ignore[attr-defined]


def check_health(target: str, service: str = "", timeout_s: float = 5.0) -> str:
    """The status name ("SERVING", "NOT_SERVING", …) that the server at `target` reports for `service`."""
    with grpc.insecure_channel(target) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout_s
        )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def main(argv: list[str] | None = None) -> int:
    """`python -m clawgym.rpc HOST:PORT [SERVICE]`: exit 0 iff the server reports SERVING (a healthcheck)."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m clawgym.rpc HOST:PORT [SERVICE]", file=sys.stderr)
        return 2
    try:
        status = check_health(*args)
    except grpc.RpcError as e:
        print(f"{args[0]}: {e.code().name} {e.details()}", file=sys.stderr)  # type: ignore[attr-defined]
        return 1
    print(status)
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    raise SystemExit(main())
