"""`clawgym serve proxy`: the capturing proxy, with an in-process engine or the inference service."""

import argparse
import logging

import uvicorn

from clawgym.config import load_config
from clawgym_services.proxy.server import create_app_from_config


def main(argv: list[str] | None = None) -> int:
    cfg = load_config()
    p = cfg.proxy
    ap = argparse.ArgumentParser(
        prog="clawgym serve proxy", description="Harness-facing model API recording every call."
    )
    ap.add_argument(
        "--model", default=p.model, help=f"policy spec; its tokenizer renders prompts (default {p.model})"
    )
    ap.add_argument("--store", default=cfg.store.url, help=f"store SQLAlchemy URL (default {cfg.store.url})")
    ap.add_argument(
        "--inference", default=p.inference_url, help="inference HOST:PORT; default: in-process engine"
    )
    ap.add_argument(
        "--redis", default=p.redis_url, help="Redis URL shared by replicas; default: in-process state"
    )
    ap.add_argument("--host", default=p.host, help=f"listen address (default {p.host})")
    ap.add_argument("--port", type=int, default=p.port, help=f"listen port (default {p.port})")
    ap.add_argument("--max-new-tokens", type=int, default=p.max_new_tokens, help="cap per call; 0 = none")
    ap.add_argument("--temperature", type=float, default=p.temperature, help="force this temperature")
    a = ap.parse_args(argv)
    keys = ("model", "inference_url", "redis_url", "host", "port", "max_new_tokens", "temperature")
    values = (a.model, a.inference, a.redis, a.host, a.port, a.max_new_tokens, a.temperature)
    proxy = p.model_copy(update=dict(zip(keys, values, strict=True)))
    cfg = cfg.model_copy(update={"proxy": proxy, "store": cfg.store.model_copy(update={"url": a.store})})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    uvicorn.run(create_app_from_config(cfg), host=proxy.host, port=proxy.port, log_level="info")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
