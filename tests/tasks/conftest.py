"""data/ holds sample tasks whose own tests run inside sandboxes only, never in this pytest session."""

collect_ignore = ["data"]
