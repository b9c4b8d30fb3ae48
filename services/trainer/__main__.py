"""`clawgym serve trainer`: runs the RL loop of a run config until it finishes (or SIGTERM/SIGINT)."""

import argparse
import logging
import signal
import sys

from clawgym.config import load_config
from clawgym.errors import ClawgymError
from clawgym_services.trainer.server import create_server

log = logging.getLogger("clawgym.trainer")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="clawgym serve trainer", description="The RL trainer (torchrun for FSDP2)."
    )
    p.add_argument("-c", "--config", help="run config YAML (the trainer section and the services it uses)")
    p.add_argument("--port", type=int, help="gRPC Trainer.Status port (default trainer.port)")
    p.add_argument(
        "--metrics-port", type=int, help="Prometheus port, 0 = none (default trainer.metrics_port)"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
        ports = {"port": args.port, "metrics_port": args.metrics_port}
        trainer = cfg.trainer.model_copy(update={k: v for k, v in ports.items() if v is not None})
        server = create_server(cfg.model_copy(update={"trainer": trainer}))
    except ClawgymError as e:  # a bad config or an unreachable service: say which, no traceback
        print(f"clawgym serve trainer: {e}", file=sys.stderr)
        return 2
    port = server.start()
    log.info("trainer of run %s on :%d (metrics :%d)", trainer.run_name, port, server.metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.request_stop())
    server.wait()
    server.stop()
    return 1 if server.error is not None else 0


if __name__ == "__main__":
    raise SystemExit(main())
