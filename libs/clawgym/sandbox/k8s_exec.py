"""One command in a pod over the exec websocket: env, cwd, stdin, output caps, deadline, tree kill.

Blocking (the `kubernetes` client is synchronous): `KubernetesBackend` runs it in its own thread
pool. What it works around:

- `kubernetes.stream.stream` swaps `call_api` on the ApiClient it is given while it connects, so
  concurrent streams (or REST calls) on one client can cross. `PodExec` gives each thread its own
  client, used for nothing but exec streams.
- Kubernetes 1.20 speaks the v4 channel protocol, which cannot close stdin. Input goes through
  `head -c N |` so the command sees EOF after the last byte (what `kubectl cp` does).
- Closing the websocket does not stop the command. On timeout or cancellation, a second exec
  runs `kill -KILL -1` in the container: every process but the container's PID 1 (the `sleep`
  that keeps the pod) dies, descendants that left their session included.
"""

import contextlib
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import yaml
from kubernetes import client
from kubernetes.stream import stream
from websocket import WebSocketException

from clawgym.sandbox.interface import ExecResult, SandboxFailed

ERROR_CHANNEL = 3
_CHUNK = 1 << 20

# argv: cwd, stdin length (-1: none), NAME=VALUE..., "--", command...
_WRAPPER = r"""cd -- "$1" || exit 126
n=$2; shift 2
while [ "$1" != "--" ]; do export "$1"; shift; done
shift
if [ "$n" -ge 0 ]; then head -c "$n" | "$@"; else "$@"; fi
"""


def wrap(argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdin_len: int | None) -> list[str]:
    """The argv actually exec'd: a POSIX sh that sets env and cwd and bounds stdin."""
    pairs = [f"{k}={v}" for k, v in env.items()]
    n = -1 if stdin_len is None else stdin_len
    return ["sh", "-c", _WRAPPER, "clawgym-exec", cwd, str(n), *pairs, "--", *argv]


def _exit_code(status_frame: bytes | str) -> int | None:
    """The exit code from the error channel's Status object (None if there is none)."""
    if not status_frame:
        return None
    status = yaml.safe_load(status_frame)
    if not isinstance(status, dict):
        return None
    if status.get("status") == "Success":
        return 0
    for cause in (status.get("details") or {}).get("causes") or []:
        if cause.get("reason") == "ExitCode":
            return int(cause["message"])
    raise SandboxFailed(f"exec failed: {status.get('message') or json.dumps(status)}")


class PodExec:
    """Runs commands in pods, through one ApiClient per thread. Thread-safe."""

    def __init__(self, configuration: client.Configuration, namespace: str) -> None:
        self.configuration = configuration
        self.namespace = namespace
        self._per_thread = threading.local()

    def _core(self) -> client.CoreV1Api:
        core = getattr(self._per_thread, "core", None)
        if core is None:
            core = self._per_thread.core = client.CoreV1Api(client.ApiClient(self.configuration))
        return core

    def _connect(self, pod: str, argv: list[str], with_stdin: bool):
        try:
            return stream(
                self._core().connect_get_namespaced_pod_exec,
                pod,
                self.namespace,
                container="sandbox",
                command=argv,
                stdin=with_stdin,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
                binary=True,
            )
        except client.ApiException as e:
            raise SandboxFailed(f"exec in pod {pod} failed: {e.reason or e}") from e

    def run(
        self,
        pod: str,
        argv: list[str],
        *,
        stdin: bytes | None,
        deadline: float,
        max_output_bytes: int,
        cancelled: Callable[[], bool] = lambda: False,
    ) -> ExecResult:
        """Runs `argv` (already wrapped) until it exits, the monotonic `deadline` passes, or cancelled()."""
        start = time.monotonic()
        resp = self._connect(pod, argv, stdin is not None)
        out, err = bytearray(), bytearray()
        truncated = timed_out = False

        def drain() -> None:
            nonlocal truncated
            for channel, buf in ((1, out), (2, err)):
                data = resp.read_channel(channel, timeout=0)
                if data:
                    room = max_output_bytes - len(buf)
                    buf += data[: max(room, 0)]
                    truncated = truncated or len(data) > room

        try:
            if stdin is not None:
                for i in range(0, len(stdin), _CHUNK):
                    resp.write_stdin(stdin[i : i + _CHUNK])
            while resp.is_open():
                left = deadline - time.monotonic()
                if left <= 0 or cancelled():
                    timed_out = left <= 0
                    break
                resp.update(timeout=min(left, 0.5))
                drain()
            drain()
            status = resp.read_channel(ERROR_CHANNEL, timeout=0)
        except (WebSocketException, OSError) as e:
            raise SandboxFailed(f"exec in pod {pod}: the stream broke: {e}") from e
        finally:
            resp.close()
        if timed_out or cancelled():
            with contextlib.suppress(SandboxFailed):  # the pod may be going away already
                self.kill_all(pod)
            code = 137
        else:
            parsed = _exit_code(status)
            if parsed is None:
                raise SandboxFailed(f"exec in pod {pod}: the stream ended without an exit status")
            code = parsed
        return ExecResult(
            exit_code=code,
            stdout=bytes(out),
            stderr=bytes(err),
            duration_s=time.monotonic() - start,
            timed_out=timed_out,
            truncated=truncated,
        )

    def kill_all(self, pod: str) -> None:
        """SIGKILL every process in the sandbox container except its PID 1."""
        resp = self._connect(pod, ["sh", "-c", "kill -KILL -1 2>/dev/null; true"], False)
        try:
            resp.run_forever(timeout=30)
        finally:
            resp.close()
