"""The app layer: the `clawgym` CLI and the embedded runtime. Nothing imports it."""
