"""The capturing proxy's library core: from a harness request to a recorded call.

`gateway` runs a call (identity → prompt → engine → reply), `generation` is one call in flight
(streaming, parsing, recording before the last byte), `live` holds what replicas share in Redis
(token cache, generated turns, seq numbers), `identity` resolves API keys to rollouts,
`metrics` the Prometheus series, `config` the `proxy` config section. `app` is the FastAPI app
over the gateway and `serving` how uvicorn serves it; the process is `clawgym_services.proxy`.
"""
