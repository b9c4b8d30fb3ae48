"""`clawgym serve inference`: runs the inference service until SIGTERM/SIGINT."""

import asyncio
import logging
import sys

from clawgym.errors import ClawgymError
from clawgym.flags import service_config
from clawgym.rpc_server import serve_until_signal
from clawgym_services.inference.server import create_server

log = logging.getLogger("clawgym.inference")


def main(argv: list[str] | None = None) -> int:
    config = service_config("inference", argv, description="A policy engine over gRPC.")
    cfg = config.inference
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        server = create_server(cfg, secret=config.rpc.shared_secret())
    except ClawgymError as e:  # no secret: say so, no traceback
        print(f"clawgym serve inference: {e}", file=sys.stderr)
        return 2
    asyncio.run(serve_until_signal(server, lambda port: log.info(
        "%s engine, model %s, on %s:%d (metrics :%d)", cfg.engine, cfg.model, cfg.host, port, server.metrics_port
    )))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
