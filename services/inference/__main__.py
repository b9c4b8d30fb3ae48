"""`clawgym serve inference`: runs the inference service until SIGTERM/SIGINT."""

import asyncio
import logging
import sys

from clawgym.errors import ClawgymError
from clawgym.flags import service_config
from clawgym.preflight import Listen, preflight
from clawgym.rpc_server import serve_until_signal

log = logging.getLogger("clawgym.inference")


def main(argv: list[str] | None = None) -> int:
    config = service_config("inference", argv, description="A policy engine over gRPC.")
    cfg = config.inference
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        secret = config.rpc.shared_secret()  # first: a config error, before any port or database is tried
        listens = [Listen.of(config, "inference", port) for port in ("port", "metrics_port")]
        preflight(config, models=["inference.model"], listens=listens)  # before the model loads
        from clawgym_services.inference.server import create_server  # torch: only once the config passed

        server = create_server(cfg, secret=secret)
    except ClawgymError as e:  # a bad model spec, a port in use, no secret: say so, no traceback
        print(f"clawgym serve inference: {e}", file=sys.stderr)
        return 2
    asyncio.run(serve_until_signal(server, lambda port: log.info(
        "%s engine, model %s, on %s:%d (metrics :%d)", cfg.engine, cfg.model, cfg.host, port, server.metrics_port
    )))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
