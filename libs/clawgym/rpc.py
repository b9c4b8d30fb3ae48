"""What every clawgym gRPC service and client share: message limits, typed errors, health.

Errors: a server renders a `ClawgymError` as its gRPC status (`grpc_code`); a client turns the
status back into the same typed error, so callers cannot tell a remote service from an
in-process one. Health: each service answers the standard `grpc.health.v1.Health` (what
`grpc_health_probe`, Kubernetes `grpc:` probes and load balancers ask) for "" and its own
service name, SERVING once it can do its work and NOT_SERVING from the start of shutdown.
The serving side of both (server lifecycle, health service, error → status) is `clawgym.rpc_server`.
"""

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from clawgym.errors import (
    AlreadyExists,
    ClawgymError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unauthenticated,
    Unavailable,
)

ERRORS_BY_CODE: dict[str, type[ClawgymError]] = {
    cls.grpc_code: cls
    for cls in (InvalidArgument, NotFound, AlreadyExists, Unauthenticated, Unavailable, FailedPrecondition)
}
ERRORS_BY_CODE["DEADLINE_EXCEEDED"] = Unavailable

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


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
