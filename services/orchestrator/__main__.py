"""`clawgym serve orchestrator`: runs the orchestrator service until SIGTERM/SIGINT."""

import asyncio
import logging
import sys

from clawgym.errors import ClawgymError
from clawgym.flags import service_config
from clawgym.log_noise import PROBE_LOGGERS, demote_routine
from clawgym.preflight import Listen, preflight
from clawgym.rpc_server import serve_until_signal
from clawgym_services.orchestrator.server import create_server

log = logging.getLogger("clawgym.orchestrator")


def main(argv: list[str] | None = None) -> int:
    cfg = service_config(
        "orchestrator", argv, description="Runs batches of rollouts.", clients_of=("sandbox", "store")
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    demote_routine(PROBE_LOGGERS)  # its health check of the proxy, once per rollout, is a DEBUG line
    try:
        cfg.rpc.shared_secret()  # checked before anything starts
        listens = [Listen.of(cfg, "orchestrator", port) for port in ("port", "metrics_port")]
        preflight(cfg, store="open_store", listens=listens)
    except ClawgymError as e:
        print(f"clawgym serve orchestrator: {e}", file=sys.stderr)
        return 2
    asyncio.run(_serve(cfg))
    return 0


async def _serve(cfg) -> None:
    server = create_server(cfg)  # on the loop that serves it: the orchestrator's semaphores belong to it

    def started(port: int) -> None:
        backend = server.orchestrator.backend
        log.info("orchestrator on :%d, metrics :%d, %s sandboxes of owner %s (instance %s, lease %s)", port,
                 server.metrics_port, backend.name, backend.owner, backend.instance, backend.lease_name)  # fmt: skip

    await serve_until_signal(server, started)


if __name__ == "__main__":
    raise SystemExit(main())
