"""`clawgym serve proxy`: the capturing proxy, with an in-process engine or the inference service."""

import logging

import uvicorn

from clawgym.flags import service_config
from clawgym_services.proxy.server import create_app_from_config


def main(argv: list[str] | None = None) -> int:
    cfg = service_config(
        "proxy",
        argv,
        description="Harness-facing model API recording every call.",
        clients_of=("inference", "store"),
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app_from_config(cfg), host=cfg.proxy.host, port=cfg.proxy.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
