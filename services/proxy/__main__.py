"""`clawgym serve proxy`: the capturing proxy, with an in-process engine or the inference service.

The process only (flags, logs, uvicorn and its signals, the shared port): the app is the library's
(`clawgym.proxy.app`, assembled by `clawgym.assemble.build_proxy_app`)."""

import logging
import sys

import uvicorn

from clawgym.assemble import build_proxy_app, build_tokenizer, open_engine, open_store
from clawgym.flags import service_config
from clawgym.log_noise import PROBE_LOGGERS, demote_routine
from clawgym.preflight import Listen, preflight
from clawgym.proxy.serving import shared_port_socket, uvicorn_config


def main(argv: list[str] | None = None) -> int:
    cfg = service_config(
        "proxy",
        argv,
        description="Harness-facing model API recording every call.",
        clients_of=("inference", "store"),
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # health checks and metric scrapes are DEBUG in the access log; each call's acknowledgement stays INFO:
    # deploy/compose_stack.py checks the database against them
    demote_routine(PROBE_LOGGERS)
    # before the tokenizer and engine load; `clawgym serve` prints a refusal as one line, exit 2
    listen = Listen.of(cfg, "proxy", "port", shared=cfg.proxy.reuse_port)
    preflight(
        cfg, models=["inference.model"], store="open_store", buses=["proxy.redis_url"], listens=[listen]
    )
    app = build_proxy_app(cfg, open_engine(cfg), open_store(cfg), build_tokenizer(cfg))
    server = uvicorn.Server(uvicorn_config(app, cfg.proxy, log_level="info"))
    sockets = None
    if cfg.proxy.reuse_port:
        try:
            sockets = [shared_port_socket(cfg.proxy.host, cfg.proxy.port)]
        except OSError as e:
            print(
                f"clawgym serve proxy: cannot listen on {cfg.proxy.host}:{cfg.proxy.port}: {e}",
                file=sys.stderr,
            )
            return 3
    server.run(sockets=sockets)  # handles SIGINT/SIGTERM itself
    return 0 if server.started else 3  # 3: uvicorn's STARTUP_FAILURE (the port was taken, …)


if __name__ == "__main__":
    raise SystemExit(main())
