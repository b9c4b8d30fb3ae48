"""`clawgym train -c run.yaml`: a full run from a config file, embedded or against services.

The mode follows from the config (ARCHITECTURE.md §8): no `orchestrator.grpc_url` → embedded, one
process (store URL, bus, local or Kubernetes sandboxes as configured); otherwise the store,
inference and orchestrator services the config names, with this process as the trainer.

A config names one run: the store run id recorded in `<trainer.checkpoint_uri>/<trainer.run_name>/
run.json` (or `trainer.run_id`). Once that run has registered a checkpoint or recorded an evaluation,
training the config again needs `--resume` (`clawgym_app.resume`): it continues from the newest
checkpoint up to `trainer.steps` in all (the target version, not steps more), keeps the recorded
evaluations instead of evaluating the initial policy again, and reports the whole run.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from clawgym.errors import ClawgymError
from clawgym_app.config_options import set_option


def command(
    config: Path = typer.Option(..., "--config", "-c", help="run config YAML (a whole ClawgymConfig)"),
    steps: int = typer.Option(0, help="override trainer.steps: the run's total (a resumed run's target too)"),
    run_dir: str = typer.Option("", help="where the report goes (default runs/<timestamp>)"),
    resume: bool = typer.Option(
        False, help="continue the config's interrupted run from its newest checkpoint (required once it has one)"
    ),
    spawn_services: bool = typer.Option(
        False, help="start store, inference, proxy and orchestrator as local `clawgym serve` processes first"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object at the end"),
    sets: list[str] = set_option(),
) -> None:
    """Train a policy with GRPO or PPO through the config's harness mix; evaluate; write the report."""
    from clawgym.config import load_config
    from clawgym.report.run_folder import LOG_FILE, new_run_dir
    from clawgym.tracking.writers import check_available
    from clawgym_app.logs import log_to_file, quiet_libraries
    from clawgym_app.resume import check_resume, find_prior_run, named_run
    from clawgym_app.runtime import Runtime, is_embedded
    from clawgym_app.runtime.services import ServiceStack
    from clawgym_app.training_run import run_with_progress

    console = Console(stderr=True) if as_json else Console()
    try:
        cfg = load_config(config, sets=sets)
        if steps:
            cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"steps": steps})})
        check_available(cfg.tracking)
        if resume and not named_run(cfg.trainer)[0]:
            check_resume(cfg.trainer, None, resume)  # no run recorded at all: say so before loading anything
        folder = Path(run_dir) if run_dir else new_run_dir()
        folder.mkdir(parents=True, exist_ok=True)
        log_to_file(folder / LOG_FILE)
        quiet_libraries()
        stack = None
        if spawn_services:
            stack = ServiceStack(cfg, folder / "services")
            with console.status(f"starting the services (logs in {stack.folder})"):
                cfg = stack.start()
        mode = "embedded" if is_embedded(cfg) else f"services (orchestrator {cfg.orchestrator.grpc_url})"
        t = cfg.trainer
        mix = ", ".join(f"{h.name}×{h.weight:g}" for h in t.harnesses)
        console.print(f"[bold]clawgym train[/bold] {config} → {folder}: {mode}; {t.algorithm.name} on {t.model}, "
                      f"{mix}, suite {t.suite}")  # fmt: skip
        try:
            with console.status("starting the runtime (store, engine, proxy, orchestrator)"):
                runtime = Runtime.open(cfg)
            with runtime:
                prior = find_prior_run(runtime.cfg.trainer, runtime.store)
                check_resume(runtime.cfg.trainer, prior, resume)
                outcome = run_with_progress(runtime, folder, console, title=f"clawgym train: {t.run_name}",
                                            settings={"config_file": str(config), "mode": mode})  # fmt: skip
        finally:
            if stack is not None:
                stack.stop()
    except ClawgymError as e:
        # one line (grep-able, whatever the terminal's width); the message may quote a file's text
        console.print(f"[red]clawgym train:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from e
    if as_json:
        print(json.dumps({**outcome.summary, "mode": mode, "report": str(outcome.report)}))
    else:
        for key, value in outcome.summary.items():
            console.print(f"{key}: {value}")
        console.print(f"report: {outcome.report}")
