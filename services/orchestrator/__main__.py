"""`clawgym serve orchestrator`: runs the orchestrator service until SIGTERM/SIGINT."""

import asyncio
import logging
import signal

from clawgym.config import ClawgymConfig
from clawgym.flags import service_config
from clawgym_services.orchestrator.server import create_server

log = logging.getLogger("clawgym.orchestrator")


def main(argv: list[str] | None = None) -> int:
    cfg = service_config(
        "orchestrator", argv, description="Runs batches of rollouts.", clients_of=("sandbox", "store")
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(cfg))
    return 0


async def _serve(cfg: ClawgymConfig) -> None:
    server = create_server(cfg)
    port = await server.start()
    backend = server.orchestrator.backend
    log.info("orchestrator on :%d, metrics :%d, %s sandboxes of owner %s", port, server.metrics_port,
             backend.name, backend.owner)  # fmt: skip
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
