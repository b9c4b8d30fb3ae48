"""`clawgym serve trainer`: runs the RL loop of a run config until it finishes (or SIGTERM/SIGINT)."""

import logging
import os
import signal
import sys

from clawgym.errors import ClawgymError
from clawgym.flags import service_config
from clawgym.preflight import Listen, preflight

log = logging.getLogger("clawgym.trainer")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = service_config(
            "trainer",
            argv,
            description="The RL trainer (torchrun for FSDP2).",
            clients_of=("store", "inference", "orchestrator"),
        )
        main_rank = os.environ.get("RANK", "0") == "0"  # torchrun: only rank 0 listens and opens the store
        ports = [Listen.of(cfg, "trainer", port) for port in ("port", "metrics_port")]
        preflight(
            cfg,
            models=["trainer.model"],
            suites=["trainer.suite", "evaluation.suite"],
            store="open_store" if main_rank else "",
            buses=["store.bus_url"] if main_rank else [],
            listens=ports if main_rank else [],
        )
        from clawgym_services.trainer.server import create_server  # torch: only once the config passed

        server = create_server(cfg)
    except ClawgymError as e:  # a bad config or an unreachable service: say which, no traceback
        print(f"clawgym serve trainer: {e}", file=sys.stderr)
        return 2
    port = server.start()
    log.info("trainer of run %s on :%d (metrics :%d)", cfg.trainer.run_name, port, server.metrics_port)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: server.request_stop())
    server.wait()
    if server.finished and cfg.trainer.after_run == "serve":
        # a Kubernetes pod restarts a container that exits, even with 0: a finished run stays up
        # answering Status (state finished) until it is stopped (helm uninstall, a rollout)
        log.info("run %s finished: serving its status until stopped", cfg.trainer.run_name)
        server.wait_for_stop_request()
    server.stop()
    return 1 if server.error is not None else 0


if __name__ == "__main__":
    raise SystemExit(main())
