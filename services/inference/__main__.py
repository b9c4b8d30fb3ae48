"""`clawgym serve inference`: runs the inference service until SIGTERM/SIGINT."""

import argparse
import asyncio
import logging
import signal

from clawgym.config import load_config
from clawgym_services.inference.server import create_server

log = logging.getLogger("clawgym.inference")


def main(argv: list[str] | None = None) -> int:
    cfg = load_config().inference
    p = argparse.ArgumentParser(prog="clawgym serve inference", description="A policy engine over gRPC.")
    p.add_argument("--model", default=cfg.model, help=f"model spec (default {cfg.model})")
    p.add_argument("--engine", choices=("torch", "vllm"), default=cfg.engine, help=f"default {cfg.engine}")
    p.add_argument("--host", default=cfg.host, help=f"listen address (default {cfg.host})")
    p.add_argument("--port", type=int, default=cfg.port, help=f"gRPC port (default {cfg.port}; 0 = any)")
    p.add_argument("--metrics-port", type=int, default=cfg.metrics_port, help="Prometheus port; 0 = none")
    p.add_argument("--max-batch", type=int, default=cfg.max_batch, help=f"default {cfg.max_batch}")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default=cfg.dtype)
    p.add_argument("--cache-dir", default=cfg.cache_dir, help=f"model cache (default {cfg.cache_dir})")
    cfg = cfg.model_copy(update=vars(p.parse_args(argv)))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    asyncio.run(_serve(cfg))
    return 0


async def _serve(cfg) -> None:
    server = create_server(cfg)
    port = await server.start()
    log.info(
        "%s engine, model %s, on %s:%d (metrics :%d)",
        cfg.engine,
        cfg.model,
        cfg.host,
        port,
        server.metrics_port,
    )
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
