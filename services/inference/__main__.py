"""`clawgym serve inference`: runs the inference service until SIGTERM/SIGINT."""

import asyncio
import logging
import signal

from clawgym.flags import service_config
from clawgym.inference.config import InferenceConfig
from clawgym_services.inference.server import create_server

log = logging.getLogger("clawgym.inference")


def main(argv: list[str] | None = None) -> int:
    cfg = service_config("inference", argv, description="A policy engine over gRPC.").inference
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(cfg))
    return 0


async def _serve(cfg: InferenceConfig) -> None:
    server = create_server(cfg)
    port = await server.start()
    log.info("%s engine, model %s, on %s:%d (metrics :%d)", cfg.engine, cfg.model, cfg.host, port,
             server.metrics_port)  # fmt: skip
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
