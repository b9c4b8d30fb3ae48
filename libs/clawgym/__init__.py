"""clawgym: RL for LLM agents through black-box harnesses (the core library)."""

__version__ = "0.1.0"
