"""`clawgym serve store`: runs the store service until SIGTERM/SIGINT."""

import argparse
import logging
import signal

from clawgym.config import load_config
from clawgym_services.store.server import create_server

log = logging.getLogger("clawgym.store")


def main(argv: list[str] | None = None) -> int:
    cfg = load_config().store
    parser = argparse.ArgumentParser(
        prog="clawgym serve store", description="The trajectory store over gRPC."
    )
    parser.add_argument(
        "--url", default=cfg.url, help="SQLAlchemy store URL (default: store.url, CLAWGYM_STORE__URL)"
    )
    parser.add_argument("--bus", default=cfg.bus_url, help=f"event bus URL (default {cfg.bus_url})")
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument("--port", type=int, default=cfg.port, help=f"port to listen on (default {cfg.port})")
    parser.add_argument(
        "--metrics-port", type=int, default=cfg.metrics_port, help=f"Prometheus port; 0 = none (default {cfg.metrics_port})"
    )
    args = parser.parse_args(argv)
    update = {"url": args.url, "bus_url": args.bus, "port": args.port, "metrics_port": args.metrics_port}
    cfg = cfg.model_copy(update=update)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = create_server(cfg, host=args.host)
    port = server.start()
    log.info(
        "store service on %s:%d, metrics :%d (store %s, bus %s)",
        args.host, port, server.metrics_port, cfg.url.split("@")[-1], cfg.bus_url,
    )  # fmt: skip
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop(grace=5))
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
