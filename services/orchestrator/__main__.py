"""`clawgym serve orchestrator`: runs the orchestrator service until SIGTERM/SIGINT."""

import argparse
import asyncio
import logging
import signal

from clawgym.config import load_config
from clawgym_services.orchestrator.server import create_server

log = logging.getLogger("clawgym.orchestrator")


def main(argv: list[str] | None = None) -> int:
    cfg = load_config()
    o = cfg.orchestrator
    p = argparse.ArgumentParser(prog="clawgym serve orchestrator", description="Runs batches of rollouts.")
    p.add_argument("--host", default=o.host, help=f"listen address (default {o.host})")
    p.add_argument("--port", type=int, default=o.port, help=f"gRPC port (default {o.port}; 0 = any)")
    p.add_argument("--metrics-port", type=int, default=o.metrics_port, help="Prometheus port; 0 = none")
    p.add_argument("--proxy-url", default=o.proxy_url, help=f"the proxy as sandboxes see it ({o.proxy_url})")
    p.add_argument("--store", default=cfg.store.url, help="store URL, used when store.grpc_url is empty")
    a = vars(p.parse_args(argv))
    store = cfg.store.model_copy(update={"url": a.pop("store")})
    cfg = cfg.model_copy(update={"orchestrator": o.model_copy(update=a), "store": store})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(cfg))
    return 0


async def _serve(cfg) -> None:
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
