"""`clawgym eval RUN_DIR | -c run.yaml [--checkpoint V] [--store.url URL] [--harness H] [--k K]`: Pass@k
with 95% intervals.

Evaluates a policy through one or more harnesses on held-out tasks of a suite: a kept checkpoint of
the run's (`--checkpoint V`, loaded into the engine first; 0 = the initial policy), a
checkpoint folder, or whatever the engine serves (the base policy embedded; the inference service's
current version otherwise). The config (a run folder's config.yaml, or `-c`) decides everything
else, so `clawgym eval RUN_DIR` repeats that run's evaluation: tasks (`evaluation`), samples,
sampling temperature and token cap (`proxy`), and each harness's turn cap and reply length
(`orchestrator.harness_settings`).

Where results go: every `clawgym eval` is an eval run of its own (kind "eval": its rollouts, calls
and Pass@k rows, its config naming the evaluated run, version and settings) in the results store:
`--store.url URL` / `--store.grpc-url HOST:PORT` if given (spelt as `clawgym serve`'s flags; `--store` /
`--store-service` are the older spellings), else the config's store (for a run folder, the one its run
recorded into: its own clawgym.db unless the config put it elsewhere). The command prints which. It never records into the
training run's own evaluations, which that run's report and `clawgym train --resume` read. With
services (`orchestrator.grpc_url`) the proxy and orchestrator record into their own store, so
`--store.url` is refused there. `--set KEY=VALUE` overrides any config field.

`--harness oracle` / `--harness nop` validate a suite (the oracle should pass every task, nop none)
without a model in the loop. With a teacher answering the calls (`proxy.teacher`: `oracle`, each
task's solution in the harness's own format, or `upstream`, another model), the recorded run is a
demonstrations run (kind "demonstrations", not "eval"): `trainer.sft.source` set to the store's run
folder reads it as its newest run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from clawgym.errors import ClawgymError, InvalidArgument
from clawgym.report.run_folder import CONFIG_FILE
from clawgym_app.config_options import set_option

if TYPE_CHECKING:
    from clawgym.config import ClawgymConfig
    from clawgym.evaluation.runner import EvalResult, EvalSpec


@dataclass(frozen=True)
class EvalRequest:
    """The command line's choices; empty/negative values defer to the config's `evaluation` section."""

    checkpoint: str = ""
    harnesses: list[str] = field(default_factory=list)
    k: int = 1
    samples: int = 0
    tasks: int = -1
    suite: str = ""
    split: str = ""
    model: str = ""
    store: str = ""  # SQLAlchemy URL of the results store
    store_service: str = ""  # or the store service's HOST:PORT


@dataclass(frozen=True)
class Recorded:
    """Where an evaluation was recorded: the store (as printed), its eval run, what it evaluated."""

    store: str
    run_id: str
    of_run: str  # the config's training run ('' when none is recorded)
    version: int


def command(
    run: Path = typer.Argument(
        None, help="a run folder (runs/<name>/): its config.yaml, store and checkpoints"
    ),
    config: Path = typer.Option(None, "--config", "-c", help="run config YAML; default: embedded defaults"),
    checkpoint: str = typer.Option(
        "",
        help="a kept version of the config's run (0 = the initial policy), or a checkpoint folder/URI; "
        "default: what the engine serves",
    ),
    harness: list[str] = typer.Option([], "--harness", "-H", help="harness to evaluate through (repeatable)"),
    k: int = typer.Option(1, "--k", "-k", help="also report Pass@k (needs samples >= k)"),
    samples: int = typer.Option(0, help="rollouts per task (default: max(k, evaluation.samples))"),
    tasks: int = typer.Option(
        -1, help="number of tasks, spread over families (default evaluation.tasks; 0 = all)"
    ),
    suite: str = typer.Option("", help="suite (default evaluation.suite or trainer.suite)"),
    split: str = typer.Option("", help="split (default evaluation.split)"),
    model: str = typer.Option("", help="policy model spec (default trainer.model, else inference.model)"),
    store: str = typer.Option(
        "",
        "--store.url",
        "--store",
        help="record the evaluation (its run, rollouts, calls, Pass@k) in this store, a SQLAlchemy URL "
        "(sqlite:///…, postgresql+psycopg://…); default: the config's store (printed)",
    ),
    store_service: str = typer.Option(
        "", "--store.grpc-url", "--store-service", help="record it in the store service at HOST:PORT instead"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the results as one JSON object"),
    sets: list[str] = set_option(),
) -> None:
    """Pass@1 and Pass@k (unbiased) with 95% intervals per harness × suite, with the config's evaluation
    settings; recorded as an eval run of its own (never among the training run's own evaluations) in
    --store.url, default the config's store (printed)."""
    from clawgym.config import load_config

    console = Console(stderr=True) if as_json else Console()
    try:
        cfg = load_config(run_config_file(run, config), sets=sets)
        request = EvalRequest(checkpoint=checkpoint, harnesses=harness, k=k, samples=samples, tasks=tasks,
                              suite=suite, split=split, model=model, store=store,
                              store_service=store_service)  # fmt: skip
        result, recorded = run_eval(cfg, request, console)
    except ClawgymError as e:
        # one line (grep-able, whatever the terminal's width); the message may quote a file's text
        console.print(f"[red]clawgym eval:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from e
    console.print(f"recorded in {recorded.store} as eval run {recorded.run_id}")
    if as_json:
        print(json.dumps({"run_id": recorded.run_id, "store": recorded.store, "of_run": recorded.of_run,
                          "version": result.version, "suite": result.suite,
                          "seconds": round(result.seconds, 1),
                          "harnesses": {h: r.metrics(result.suite, result.version)
                                        for h, r in result.harnesses.items()}}))  # fmt: skip
        return
    console.print(results_table(result, recorded))


# --- the evaluation: config, results store, policy version, run, progress ---


def configure(cfg: ClawgymConfig, req: EvalRequest) -> tuple[ClawgymConfig, EvalSpec]:
    """The config to open (the model filled in, the request's choices in its `evaluation` section)
    and the evaluation to run."""
    from clawgym.errors import InvalidArgument
    from clawgym.evaluation.select import eval_spec

    if req.k < 1:
        raise InvalidArgument(f"--k must be >= 1, got {req.k}")
    e = cfg.evaluation
    samples = req.samples or max(req.k, e.samples)
    update: dict = {"samples": samples, "ks": sorted({1, req.k, *(kk for kk in e.ks if kk <= samples)})}
    update |= {name: getattr(req, name) for name in ("suite", "split", "harnesses") if getattr(req, name)}
    if req.tasks >= 0:
        update["tasks"] = req.tasks
    if req.tasks >= 0 or req.split or req.suite:
        update["task_ids"] = []  # a new choice of tasks replaces the config's own list
    model = req.model or cfg.trainer.model or cfg.inference.model  # the default policy: inference.model's
    cfg = cfg.model_copy(
        update={
            "trainer": cfg.trainer.model_copy(update={"model": model}),
            "evaluation": e.model_copy(update=update),
        }
    )
    harnesses = [h.name for h in cfg.trainer.harnesses]
    return cfg, eval_spec(cfg.evaluation, cfg.trainer.suite, harnesses, cfg.sandbox.task_images)


def results_store(cfg: ClawgymConfig, req: EvalRequest) -> tuple[ClawgymConfig, str]:
    """`cfg` with its store replaced by the one `--store.url`/`--store.grpc-url` names (if any), and that
    store as printed ("the config's store sqlite:///…")."""
    from clawgym.assemble import is_embedded  # not clawgym_app.runtime, whose Runtime imports torch
    from clawgym.errors import InvalidArgument

    if req.store and req.store_service:
        raise InvalidArgument("name one results store: --store.url URL or --store.grpc-url HOST:PORT")
    if not (req.store or req.store_service):
        return cfg, f"the config's store {describe_store(cfg)}"
    if not is_embedded(cfg):
        raise InvalidArgument(
            "--store.url/--store.grpc-url need an embedded evaluation: with services (orchestrator.grpc_url) "
            "the proxy and orchestrator record into the services' own store"
        )
    update = {"grpc_url": req.store_service} if req.store_service else {"url": req.store, "grpc_url": ""}
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update=update)})
    return cfg, describe_store(cfg)


def describe_store(cfg: ClawgymConfig) -> str:
    """The store a config names, as printed (a database password hidden)."""
    from sqlalchemy.engine import make_url

    if cfg.store.grpc_url:
        return f"store service {cfg.store.grpc_url}"
    try:
        return make_url(cfg.store.url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: opening it will say so
        return cfg.store.url


def run_config_file(run: Path | None, config: Path | None) -> Path | None:
    """The config a run folder or `-c` names (not both); None: the embedded defaults."""
    if run is None:
        return config
    if config is not None:
        raise InvalidArgument(f"name a run folder ({run}) or -c CONFIG, not both")
    if not (run / CONFIG_FILE).is_file():
        raise InvalidArgument(f"{run} holds no {CONFIG_FILE}: not a run folder")
    return run / CONFIG_FILE


def training_run(cfg: ClawgymConfig) -> str:
    """The config's training run id (trainer.run_id, else its checkpoint folder's run.json), or ''."""
    from clawgym.trainer.checkpoint import recorded_run_id

    return cfg.trainer.run_id or recorded_run_id(cfg.trainer)


def requested_checkpoint(cfg: ClawgymConfig, checkpoint: str) -> tuple[int, str]:
    """(version, uri) of `--checkpoint`: a kept version of the config's run, looked up in the config's
    own store (uri '' for 0, the initial policy), or a folder/URI (version 0 unless its name is vN)."""
    from clawgym.assemble import open_store
    from clawgym.errors import NotFound
    from clawgym.trainer.checkpoint import find_checkpoint, version_of

    if not checkpoint.isdigit():
        return version_of(checkpoint) or 0, checkpoint
    version = int(checkpoint)
    if version == 0:
        return 0, ""
    run_id = training_run(cfg)
    if not run_id:
        raise NotFound(
            "--checkpoint V needs the config's run (trainer.run_id, or run.json under trainer.checkpoint_uri "
            f"{cfg.trainer.checkpoint_uri}/{cfg.trainer.run_name})"
        )
    store = open_store(cfg)
    try:
        try:
            store.get_run(run_id)
        except NotFound:
            raise NotFound(f"the config's store {describe_store(cfg)} has no run {run_id}") from None
        try:
            return version, find_checkpoint(store, run_id, version)
        except NotFound as e:
            t = cfg.trainer
            raise NotFound(
                f"{e}, and v0 (the initial policy); what a run keeps: trainer.keep_checkpoints "
                f"({t.keep_checkpoints}) and trainer.keep_every ({t.keep_every})"
            ) from None
    finally:
        store.close()


def run_eval(cfg: ClawgymConfig, req: EvalRequest, console: Console) -> tuple[EvalResult, Recorded]:
    """Opens the runtime on the results store, serves the requested checkpoint, evaluates and records
    as an eval run of its own; returns the result and where it was recorded."""
    from clawgym.errors import FailedPrecondition
    from clawgym.evaluation.runner import eval_run
    from clawgym.preflight import preflight
    from clawgym_app.logs import quiet_libraries
    from clawgym_app.progress import RolloutBar, make_progress

    quiet_libraries()
    cfg, spec = configure(cfg, req)
    results_cfg, where = results_store(cfg, req)
    preflight(results_cfg, models=["trainer.model"], store="open_store")
    # torch and the rest only once the config passed: a refusal above comes in about a second
    from clawgym_app.runtime import Runtime

    version, uri = requested_checkpoint(cfg, req.checkpoint) if req.checkpoint else (None, "")
    of_run = training_run(cfg)
    cfg = results_cfg
    console.print(f"clawgym eval: results go to {where}")
    with console.status("starting the runtime (store, engine, proxy, orchestrator)"):
        runtime = Runtime.open(cfg)
    with runtime:
        served = runtime.served_version()
        if uri:
            with console.status(f"loading checkpoint v{version} into the engine"):
                runtime.load_checkpoint(version, uri)
        elif version is None:
            version = served
        elif served != version:
            raise FailedPrecondition(
                "--checkpoint 0 is the initial policy, which has no checkpoint to load; "
                f"the engine serves v{served}"
            )
        # with a teacher answering, the rollouts are demonstrations: a run trainer.sft.source reads
        kind = {"kind": "demonstrations"} if cfg.proxy.teacher.kind else {}
        run_id = eval_run(runtime.store, cfg.trainer.run_name, {**kind,
            "model": cfg.trainer.model, "of_run": of_run, "version": version, "checkpoint": uri,
            "suite": spec.suite, "task_ids": list(spec.task_ids), "harnesses": list(spec.harnesses),
            "samples": spec.samples, "ks": list(spec.ks), "proxy": cfg.proxy.model_dump(mode="json"),
            "harness_settings": {h: s.model_dump(mode="json")
                                 for h, s in cfg.orchestrator.harness_settings.items()},
        })  # fmt: skip
        total = len(spec.task_ids) * len(spec.harnesses) * spec.samples
        with make_progress(console) as progress:
            bar = RolloutBar(progress, f"eval v{version} ({', '.join(spec.harnesses)})", total)
            result = runtime.evaluate(
                spec, version=version, eval_run_id=run_id, record_run_id=run_id, on_status=bar
            )
    return result, Recorded(where, run_id, of_run, version)


# --- printing ---


def results_table(result: EvalResult, recorded: Recorded) -> Table:
    """One row per harness: tasks, samples, each Pass@k with its interval, mean reward, failures."""
    of = f" of run {recorded.of_run}" if recorded.of_run else ""
    table = Table(title=f"clawgym eval · policy v{result.version}{of} · eval run {recorded.run_id}")
    for column in (
        "harness",
        "suite",
        "tasks",
        "samples",
        "Pass@k (95% CI)",
        "mean reward",
        "infra failures",
    ):
        table.add_column(column)
    for name, r in result.harnesses.items():
        passes = "\n".join(
            f"Pass@{kk} {p.value:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}] ({p.method})"
            for kk, p in r.pass_at.items()
        )
        table.add_row(name, result.suite, str(len(r.counts)), str(sum(t.n for t in r.counts)), passes,
                      f"{r.mean_reward:.3f}", str(r.infra_failures))  # fmt: skip
    return table
