"""The `clawgym` commands, one module each: options, progress and printing around calls into clawgym.

`quickstart`, `train`, `evaluate` (`clawgym eval`), `rollout`, `session`, `tasks`, `serve`. A command
module holds no domain logic (that is the library's) and imports its heavy modules (torch,
transformers, the services) inside the command, so `clawgym --help` stays quick. What several
commands share lives beside this package: `training_run`, `progress`, `logs`.
"""
