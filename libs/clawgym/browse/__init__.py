"""The rollout browser: runs → steps, groups, rollouts → one rollout's prefix tree.

`pages` the JSON reads, `static/` the page, `app` the FastAPI app serving both (and `BrowseServer`,
its thread in the store service), `host_check` the Host names it answers. Served by `clawgym browse`
and by the store service on `store.browse_port`.
"""
