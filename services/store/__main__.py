"""`clawgym serve store`: runs the store service until SIGTERM/SIGINT."""

import logging
import signal
import sys

from clawgym.errors import ClawgymError
from clawgym.flags import service_config
from clawgym.preflight import Listen, preflight
from clawgym_services.store.server import create_server

log = logging.getLogger("clawgym.store")


def main(argv: list[str] | None = None) -> int:
    config = service_config("store", argv, description="The trajectory store over gRPC.")
    cfg = config.store
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        secret = config.rpc.shared_secret()  # first: a config error, before any port or database is tried
        listens = [Listen.of(config, "store", port) for port in ("port", "metrics_port", "browse_port")]
        preflight(config, store="open_sql_store", listens=listens)
        server = create_server(cfg, secret=secret)
    except ClawgymError as e:  # a port in use, an unreachable database, no secret: say so, no traceback
        print(f"clawgym serve store: {e}", file=sys.stderr)
        return 2
    port = server.start()
    log.info("store service on %s:%d, metrics :%d, browser :%d (store %s, bus %s)", cfg.host, port,
             server.metrics_port, server.browse_port, cfg.url.split("@")[-1], cfg.bus_url.split("@")[-1])  # fmt: skip
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.stop(grace=5))
    server.wait_for_termination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
