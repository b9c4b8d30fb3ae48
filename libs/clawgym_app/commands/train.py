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
import logging
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym_app.config_options import set_option

if TYPE_CHECKING:
    from clawgym.config import ClawgymConfig


def command(
    run: Path | None = typer.Argument(
        None, help="a run folder: continue it (--resume) with its config.yaml, or start a new run there"
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="run config YAML (a whole ClawgymConfig) of a new run"
    ),
    steps: int = typer.Option(0, help="override trainer.steps: the run's total (a resumed run's target too)"),
    run_dir: str = typer.Option("", hidden=True, help="the run folder (as the RUN argument)"),
    resume: bool = typer.Option(
        False,
        help="continue the folder's interrupted run from its newest checkpoint (required once it has one)",
    ),
    spawn_services: bool = typer.Option(
        False, help="start store, inference, proxy and orchestrator as local `clawgym serve` processes first"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the summary as one JSON object at the end"),
    sets: list[str] = set_option(),
) -> None:
    """Train a policy with GRPO or PPO through the config's harness mix; evaluate; write the report.

    Everything of the run lives in its folder (runs/<trainer.run_name, when the config names one, else
    a timestamp>): config.yaml, the SQLite store and checkpoints unless the config puts them elsewhere,
    TensorBoard events, the report, run.log. Ctrl-C stops after the current step and writes the report
    of what was done; `clawgym train RUN --resume` goes on in the same folder."""
    from clawgym.preflight import preflight
    from clawgym.report.run_folder import LOG_FILE
    from clawgym.run import in_folder, refuse_trained_evaluation, write_run_config
    from clawgym.tracking.writers import check_available
    from clawgym_app.logs import log_to_file, quiet_libraries, set_threads

    console = Console(stderr=True) if as_json else Console()
    folder: Path | None = None
    created = started = False
    try:
        folder, cfg = run_folder_and_config(run or (Path(run_dir) if run_dir else None), config, sets)
        if steps:
            cfg = cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"steps": steps})})
        cfg = in_folder(cfg, folder)
        check_available(cfg.tracking)
        refuse_trained_evaluation(cfg)  # before any model loads: never score a task the run trains on
        preflight(cfg, models=["trainer.model"], suites=["trainer.suite", "evaluation.suite"],
                  store="open_store", buses=["store.bus_url"])  # fmt: skip
        # torch and the rest only once the config passed: a refusal above comes in about a second
        from clawgym_app.resume import check_resume, find_prior_run, named_run
        from clawgym_app.runtime import Runtime, is_embedded
        from clawgym_app.runtime.services import ServiceStack
        from clawgym_app.training_run import run_with_progress

        if resume and not named_run(cfg.trainer)[0]:
            check_resume(cfg.trainer, None, resume)  # no run recorded at all: say so before loading anything
        created = not folder.exists()
        folder.mkdir(parents=True, exist_ok=True)
        log_to_file(folder / LOG_FILE)
        quiet_libraries()
        write_run_config(folder, cfg)
        stack = None
        if spawn_services:
            stack = ServiceStack(cfg, folder / "services")
            with console.status(f"starting the services (logs in {stack.folder})"):
                cfg = stack.start()
        embedded = is_embedded(cfg)
        mode = "embedded" if embedded else f"services (orchestrator {cfg.orchestrator.grpc_url})"
        # embedded: the engine and the trainer share this process's cores (async: both compute at once),
        # but in SFT steps no rollout runs: the trainer takes every share then
        computing = 2 if cfg.trainer.mode == "async" else 1
        threads = set_threads(0, computing=computing) if embedded else None
        t = cfg.trainer
        mix = ", ".join(f"{h.name}×{h.weight:g}" for h in t.harnesses)
        console.print(f"[bold]clawgym train[/bold] → {escape(str(folder))}: {mode}; {t.algorithm.name} on "
                      f"{escape(t.model)}, {escape(mix)}, suite {escape(t.suite)}")  # fmt: skip
        try:
            with console.status("starting the runtime (store, engine, proxy, orchestrator)"):
                runtime = Runtime.open(cfg, sft_threads=threads * computing if threads else 0)
            with runtime:
                prior = find_prior_run(runtime.cfg.trainer, runtime.store)
                check_resume(runtime.cfg.trainer, prior, resume)
                started = True
                outcome = run_with_progress(runtime, folder, console, title=f"clawgym train: {t.run_name}",
                                            settings={"config_file": str(config or folder), "mode": mode,
                                                      "torch_threads": threads})  # fmt: skip
        finally:
            if stack is not None:
                stack.stop()
    except ClawgymError as e:
        # one line (grep-able, whatever the terminal's width); the message may quote a file's text
        console.print(f"[red]clawgym train:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from e
    finally:
        if created and not started and folder is not None:
            forget_folder(folder)  # a refused or failed start leaves no folder behind
    if outcome.stopped:
        console.print(
            f"[yellow]stopped at version {outcome.version} of {t.steps}[/yellow]: its checkpoint is kept in "
            f"{escape(t.checkpoint_uri)}, the report of what was done is {escape(str(outcome.report))}; "
            f"continue with: clawgym train {escape(str(folder))} --resume",
            soft_wrap=True,
        )
        raise typer.Exit(130)
    if as_json:
        print(
            json.dumps(
                {
                    **outcome.summary,
                    "mode": mode,
                    "torch_threads": threads,
                    "report": str(outcome.report),
                    "run_dir": str(folder),
                }
            )
        )
    else:
        for key, value in outcome.summary.items():
            console.print(f"{key}: {value}")
        console.print(f"report: {outcome.report}")


def run_folder_and_config(
    run: Path | None, config: Path | None, sets: list[str]
) -> tuple[Path, ClawgymConfig]:
    """(the run's folder, its config): a folder holding config.yaml is that run's (`--set` over it);
    else `-c CONFIG` starts a run in `run` or, without one, in runs/<run_name or timestamp>."""
    from clawgym.config import load_config
    from clawgym.report.run_folder import CONFIG_FILE, RUNS_ROOT, fresh_run_dir

    if run is not None and (run / CONFIG_FILE).is_file():
        if config is not None:
            raise InvalidArgument(
                f"{run} is a run folder (it holds {CONFIG_FILE}): continue it without -c, or give a new run "
                "its own folder"
            )
        return run, load_config(run / CONFIG_FILE, sets=sets)
    if config is None:
        where = f"{run} holds no {CONFIG_FILE}" if run is not None else "no run folder was given"
        raise InvalidArgument(f"{where}: name a run config with -c CONFIG to start a run")
    cfg = load_config(config, sets=sets)
    if run is not None:
        return run, cfg
    named = "run_name" in cfg.trainer.model_fields_set
    return (Path(RUNS_ROOT) / cfg.trainer.run_name if named else fresh_run_dir()), cfg


def forget_folder(folder: Path) -> None:
    """Removes a run folder this command made for a run that never started (its log included)."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == folder.resolve():
            root.removeHandler(handler)
            handler.close()
    shutil.rmtree(folder, ignore_errors=True)
