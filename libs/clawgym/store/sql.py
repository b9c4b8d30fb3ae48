"""`SqlStore`: the in-process `TrajectoryStore` on SQLAlchemy (PostgreSQL or SQLite) plus an event bus.

Owns the store's queries and transactions, and the events they cause (`rollouts.done`,
`groups.ready`, `checkpoints`); not input checks (`validate`), row unpacking (`rows`), the schema
(`models`, `migrations`) or the gRPC shell (`clawgym_services.store`).

Rules it keeps:
1. Every write is one transaction (calls may share one, rule 7); a rejected request writes nothing (checks run first, and a
   failure inside rolls the whole transaction back).
2. A rollout's API token is random (`secrets`) and stored only as its sha256; ended rollouts
   still resolve (the proxy decides what an ended rollout's token may do).
3. A group is ready when its last rollout ends, announced on `groups.ready` exactly once, even
   when rollouts end concurrently: each finish increments `groups.ended` with one UPDATE, which
   row-locks the group on PostgreSQL (SQLite serialises writers), so exactly one transaction
   sees `ended == size`. Events are published after commit, so a reader sees the whole group.
4. No calls are recorded for an ended rollout: its group may already be trained on.
5. A checkpoint's registration is its training step's commit point: the groups the step consumed
   (`Checkpoint.group_ids`) are marked consumed in the same transaction, and only complete groups of
   the run that no earlier checkpoint consumed can be; otherwise nothing is written. So a group is
   trained on at most once, and `list_unconsumed_groups` is what a restarted trainer still owes.
6. Orchestrator leases: each orchestrator instance heartbeats (`orchestrator_heartbeat`); a rollout
   names the instance that registered it. An instance is lost once its heartbeat is older than the
   lease, or at once when a new instance of the same name (its sandbox owner, unique among live
   orchestrators) heartbeats: its unended rollouts are failed in the same transaction that deletes
   its row, under that row's lock (SKIP LOCKED), so two survivors never fail the same rollouts twice.
7. Calls are group-committed (`group_commit`): `record_call`s that arrive while a transaction of
   calls is in flight are written together in the next one, and each returns only once the
   transaction holding its call committed, so a returned call is durable. Batching never
   changes an outcome: a call is checked before it joins a batch, and a batch whose transaction
   fails is written again one call per transaction, so each caller gets its own error. On
   PostgreSQL a batch is one execution of a prepared statement, each call's row encoded in its
   caller's thread (`pg_prepared`): a call it leaves out (its rollout unknown or ended, its seq
   recorded already) is written again alone, for the same reason. On SQLite a batch is one Core
   transaction.
"""

import hashlib
import logging
import secrets
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any, NamedTuple

import psycopg
from sqlalchemy import delete, exc, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from clawgym.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound, Unavailable
from clawgym.records import (
    ENDED_ROLLOUT_STATES,
    RUN_STATES,
    Call,
    Checkpoint,
    EvalRecord,
    Group,
    GroupReady,
    GroupSummary,
    Judgment,
    RegisteredRollout,
    Rollout,
    RolloutSpec,
    RolloutWithCalls,
    Run,
    TrainStep,
)
from clawgym.store import rows, validate
from clawgym.store.bus import CHECKPOINTS, GROUPS_READY, ROLLOUTS_DONE, EventBus
from clawgym.store.bus_memory import MemoryBus
from clawgym.store.database import create_store_engine, read_only, store_label
from clawgym.store.group_commit import GroupCommit, Pending
from clawgym.store.migrations import migrate, require_current
from clawgym.store.models import (
    CallRow,
    CheckpointRow,
    EvalRow,
    GroupRow,
    JudgmentRow,
    OrchestratorRow,
    RolloutRow,
    RunRow,
    TrainStepRow,
)
from clawgym.store.pg_prepared import PgPreparedWriter

log = logging.getLogger(__name__)

CALL_BATCH_BYTES = 64 * 2**20  # packed arrays per batch of calls (a batch holds one call at least)
TOKEN_PREFIX = "cg-"  # makes a leaked key recognisable in logs and secret scanners


def hash_token(token: str) -> str:
    """What the store keeps of an API token."""
    return hashlib.sha256(token.encode()).hexdigest()


def _new_id() -> str:
    return uuid.uuid4().hex


class QueuedCall(NamedTuple):
    """A checked call in the group commit: its columns, and what the batch writer made of them in
    the caller's thread (`encode`; None where it needs nothing)."""

    values: dict[str, Any]
    encoded: Any = None


class SqlStore:
    """The trajectory store on one SQL database; thread-safe (one pooled engine, a session per call)."""

    def __init__(
        self,
        url: str,
        bus: EventBus | None = None,
        *,
        max_call_bytes: int = validate.DEFAULT_MAX_CALL_BYTES,
        pool_size: int = 16,
        pg_batches_in_flight: int = 2,
        writable: bool = True,
    ) -> None:
        """Connects, and creates or upgrades the schema through Alembic (`migrations.migrate`).

        `writable=False` (the reading commands): a read-only connection that neither migrates nor
        creates anything; a missing, foreign, older or newer database is refused in one line
        (`database.read_only_url`, `migrations.require_current`), and every write fails.

        Concurrent `record_call`s share transactions (rule 7): on PostgreSQL one execution of a prepared
        statement per batch (`pg_prepared`), `pg_batches_in_flight` batches at once; on SQLite a Core
        transaction per batch, one at a time.
        """
        if pg_batches_in_flight < 1:
            raise InvalidArgument(f"pg_batches_in_flight must be at least 1, got {pg_batches_in_flight}")
        self.bus: EventBus = bus if bus is not None else MemoryBus()
        self.max_call_bytes = max_call_bytes
        self._engine = create_store_engine(url, pool_size=pool_size, writable=writable)
        self._pg_calls: PgPreparedWriter | None = None
        if writable and self._engine.dialect.name == "postgresql":
            self._pg_calls = PgPreparedWriter(self._engine)
        # PostgreSQL keeps `pg_batches_in_flight` batches in flight, so one batch's commit (its WAL
        # flush) overlaps the next one's insert; SQLite has a single writer anyway. `.batches` and
        # `.items` say how much batching happened (the bench, the tests).
        inflight = pg_batches_in_flight if self._pg_calls is not None else 1
        self.call_batcher = GroupCommit(self._write_calls, max_bytes=CALL_BATCH_BYTES, max_inflight=inflight)
        self._reader = read_only(self._engine)
        try:
            with self._db_errors():
                if writable:
                    migrate(self._engine)
                else:
                    require_current(self._engine, store_label(url))
        except Exception:  # refused or unreachable: no pooled connection outlives the error
            self._engine.dispose()
            raise

    def warm_up(self) -> None:
        """A read (a pooled connection, the token lookup's compiled query) and the batch writer's
        connections, opened before the first call needs them (a proxy's first call: ~5 ms)."""
        with suppress(NotFound):
            self.resolve_token("warm-up")
        if self._pg_calls is not None:
            self._pg_calls.warm_up(self.call_batcher.max_inflight)

    def close(self) -> None:
        """Closes the pool's connections and the bus."""
        if self._pg_calls is not None:
            self._pg_calls.close()
        self._engine.dispose()
        self.bus.close()

    # --- runs ---

    def create_run(self, name: str, config: dict[str, Any] | None = None) -> Run:
        config, _ = validate.json_object("config", config)
        row = RunRow(
            id=_new_id(),
            name=validate.text("name", name),
            config=config,
            status="created",
            created_at=time.time(),
        )
        with self._write() as s:
            s.add(row)
        return rows.run_record(row)

    def get_run(self, run_id: str) -> Run:
        with self._read() as s:
            return rows.run_record(self._run(s, run_id))

    def set_run_status(self, run_id: str, status: str) -> Run:
        status = validate.name("status", status, RUN_STATES)
        with self._write() as s:
            row = self._run(s, run_id)
            row.status = status
        return rows.run_record(row)

    def list_runs(self) -> list[Run]:
        with self._read() as s:
            found = s.scalars(select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id))
            return [rows.run_record(r) for r in found]

    # --- rollouts ---

    def register_rollouts(self, run_id: str, specs: list[RolloutSpec]) -> list[RegisteredRollout]:
        for i, spec in enumerate(specs):
            for field in ("group_id", "task_id", "harness"):
                validate.text(f"rollouts[{i}].{field}", getattr(spec, field))
            validate.integer(f"rollouts[{i}].policy_version_start", spec.policy_version_start)
            validate.text(f"rollouts[{i}].orchestrator_id", spec.orchestrator_id, required=False)
        tokens = [TOKEN_PREFIX + secrets.token_urlsafe(32) for _ in specs]
        now = time.time()
        sizes: dict[str, int] = {}
        for spec in specs:
            sizes[spec.group_id] = sizes.get(spec.group_id, 0) + 1
        with self._write() as s:
            self._run(s, run_id)
            # A fixed lock order (sorted group ids), so concurrent registrations cannot deadlock.
            next_index = {g: self._grow_group(s, run_id, g, n, now) for g, n in sorted(sizes.items())}
            new = []
            for spec, token in zip(specs, tokens, strict=True):
                index, next_index[spec.group_id] = next_index[spec.group_id], next_index[spec.group_id] + 1
                new.append(
                    RolloutRow(
                        id=_new_id(), run_id=run_id, group_id=spec.group_id, group_index=index, task_id=spec.task_id,
                        harness=spec.harness, status="registered", reward=None, passed=None, error="",
                        policy_version_start=spec.policy_version_start, sandbox="", timings={},
                        token_hash=hash_token(token), created_at=now, started_at=None, ended_at=None,
                        orchestrator_id=spec.orchestrator_id or None,
                    )
                )  # fmt: skip
            s.add_all(new)
        return [RegisteredRollout(rollout_id=r.id, token=t) for r, t in zip(new, tokens, strict=True)]

    def resolve_token(self, token: str) -> Rollout:
        token = validate.text("token", token)
        with self._read() as s:
            row = s.scalars(
                select(RolloutRow).where(RolloutRow.token_hash == hash_token(token))
            ).one_or_none()
            if row is None:
                raise NotFound("unknown rollout token")  # never echo a secret
            return rows.rollout_record(row)

    def get_rollout(self, rollout_id: str) -> Rollout:
        with self._read() as s:
            return rows.rollout_record(self._rollout(s, rollout_id))

    def start_rollout(self, rollout_id: str, sandbox: str = "") -> Rollout:
        sandbox = validate.text("sandbox", sandbox, required=False)
        with self._write() as s:
            row = self._rollout(s, rollout_id, lock=True)
            if row.status in ENDED_ROLLOUT_STATES:
                raise FailedPrecondition(
                    f"rollout {rollout_id} has ended ({row.status}); it cannot start again"
                )
            row.status, row.sandbox = "running", sandbox
            row.started_at = row.started_at or time.time()
        return rows.rollout_record(row)

    def finish_rollout(
        self,
        rollout_id: str,
        status: str,
        reward: float | None = None,
        passed: bool | None = None,
        error: str = "",
        timings: dict[str, float] | None = None,
        breakdown: dict[str, Any] | None = None,
        *,
        verifier_output: str = "",
        harness_stderr: str = "",
    ) -> Rollout:
        status = validate.name("status", status, ENDED_ROLLOUT_STATES)
        checked_breakdown = None if breakdown is None else validate.json_object("breakdown", breakdown)[0]
        reward = validate.number("reward", reward, optional=True)
        if passed is not None and not isinstance(passed, bool):
            raise InvalidArgument(f"passed must be a bool or None, got {passed!r}")
        error = validate.text("error", error, required=False)
        verifier_output = validate.text("verifier_output", verifier_output, required=False)
        harness_stderr = validate.text("harness_stderr", harness_stderr, required=False)
        checked_timings = validate.timings(timings)
        with self._write() as s:
            row = self._rollout(s, rollout_id, lock=True)
            if row.status in ENDED_ROLLOUT_STATES:
                raise FailedPrecondition(f"rollout {rollout_id} has ended already ({row.status})")
            row.status, row.reward, row.passed, row.error = status, reward, passed, error
            row.timings, row.ended_at = checked_timings, time.time()
            row.reward_breakdown = checked_breakdown
            row.verifier_output, row.harness_stderr = verifier_output, harness_stderr
            group_ready = self._count_ended(s, row.group_id, row.ended_at)
        record = rows.rollout_record(row)
        fields = {
            "rollout_id": record.id,
            "group_id": record.group_id,
            "run_id": record.run_id,
            "status": status,
        }
        self._publish(ROLLOUTS_DONE, fields)
        if group_ready:
            self._publish(GROUPS_READY, {"group_id": record.group_id, "run_id": record.run_id})
        return record

    def list_rollouts(self, run_id: str, group_id: str = "") -> list[Rollout]:
        group_id = validate.text("group_id", group_id, required=False)
        with self._read() as s:
            self._run(s, run_id)
            query = select(RolloutRow).join(GroupRow, GroupRow.id == RolloutRow.group_id)
            query = query.where(RolloutRow.run_id == run_id)
            if group_id:
                query = query.where(RolloutRow.group_id == group_id)
            found = s.scalars(query.order_by(GroupRow.created_at, GroupRow.id, RolloutRow.group_index))
            return [rows.rollout_record(r) for r in found]

    def orchestrator_heartbeat(self, instance_id: str, name: str, lease_s: float) -> list[str]:
        """Renews the lease of orchestrator instance `instance_id` (named `name`) and fails every
        unended rollout of the instances it finds lost (rule 6) as an infrastructure failure, never
        rewarded, so their groups complete; returns those rollouts' ids."""
        instance_id = validate.text("instance_id", instance_id)
        name = validate.text("name", name)
        lease_s = validate.number("lease_s", lease_s)
        if lease_s <= 0:
            raise InvalidArgument(f"lease_s must be positive, got {lease_s}")
        now = time.time()
        failed: list[RolloutRow] = []
        ready: list[tuple[str, str]] = []
        with self._write() as s:
            dialect_insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
            s.execute(
                dialect_insert(OrchestratorRow)
                .values(id=instance_id, name=name, started_at=now, heartbeat_at=now)
                .on_conflict_do_update(index_elements=["id"], set_={"heartbeat_at": now})
            )
            lost = s.execute(
                select(OrchestratorRow.id, OrchestratorRow.name)
                .where(
                    OrchestratorRow.id != instance_id,
                    or_(OrchestratorRow.name == name, OrchestratorRow.heartbeat_at < now - lease_s),
                )
                .order_by(OrchestratorRow.id)
                .with_for_update(skip_locked=True)
            ).all()
            for lost_id, lost_name in lost:
                why = "restarted" if lost_name == name else f"sent no heartbeat for {lease_s:.0f}s"
                error = (
                    f"infrastructure: orchestrator {lost_name} ({lost_id}) was lost ({why}) "
                    "while this rollout was registered or running"
                )
                rows_ = s.scalars(
                    select(RolloutRow)
                    .where(
                        RolloutRow.orchestrator_id == lost_id, RolloutRow.status.not_in(ENDED_ROLLOUT_STATES)
                    )
                    .order_by(RolloutRow.group_id, RolloutRow.id)  # group locks in one order
                    .with_for_update()
                ).all()
                for row in rows_:
                    row.status, row.reward, row.passed, row.error = "failed", None, None, error
                    row.timings, row.ended_at = {**(row.timings or {}), "orchestrator_lost": 1.0}, now
                    if self._count_ended(s, row.group_id, now):
                        ready.append((row.group_id, row.run_id))
                    failed.append(row)
                s.execute(delete(OrchestratorRow).where(OrchestratorRow.id == lost_id))
            done = [(r.id, r.group_id, r.run_id) for r in failed]
        if done:
            log.warning("failed %d rollouts of %d lost orchestrator instances", len(done), len(lost))
        for rollout_id, group_id, run_id in done:
            self._publish(
                ROLLOUTS_DONE,
                {"rollout_id": rollout_id, "group_id": group_id, "run_id": run_id, "status": "failed"},
            )
        for group_id, run_id in ready:
            self._publish(GROUPS_READY, {"group_id": group_id, "run_id": run_id})
        return [rollout_id for rollout_id, _, _ in done]

    # --- calls ---

    def record_call(self, call: Call) -> str:
        values = validate.call_values(call, self.max_call_bytes)  # a bad call never joins a batch
        values["id"] = _new_id()
        size = sum(len(values[f]) for f in ("prompt_ids", "output_ids", "output_logprobs", "output_versions"))
        # encoded here, while the batch ahead is written, not by the leader of the next one
        encoded = self._pg_calls.encode(values) if self._pg_calls is not None else None
        return self.call_batcher.submit(QueuedCall(values, encoded), size)

    def _write_call(self, values: dict[str, Any]) -> str:
        """One call in its own transaction: a call its batch left out, or one of a batch that failed."""
        try:
            with self._write() as s:
                status = s.scalar(
                    select(RolloutRow.status)
                    .where(RolloutRow.id == values["rollout_id"])
                    .with_for_update(read=True)
                )
                self._check_open(values["rollout_id"], status)
                s.execute(insert(CallRow).values(created_at=time.time(), **values))
        except exc.IntegrityError as e:
            raise AlreadyExists(f"call {values['rollout_id']}#{values['seq']} is recorded already") from e
        return values["id"]

    def _write_calls(self, batch: list[Pending]) -> None:
        """Writes a batch of checked calls in one transaction, settling each (rule 7).

        Calls of unknown or ended rollouts are settled with their own error and left out; the rest
        go in one multi-row INSERT. If that transaction fails (a duplicate seq, a refused value, a
        deadlock, an outage), every call of the batch is written again alone, so each caller gets
        exactly the outcome the one-transaction path gives it.
        """
        if self._pg_calls is not None:
            self._write_calls_pg(batch)
            return
        if len(batch) == 1:
            self._settle_alone(batch[0])
            return
        try:
            # A Core connection, not an ORM session: the batch makes no objects (and is ~10% faster).
            with self._engine.begin() as s:  # any failure: the fallback below
                ids = sorted({p.value.values["rollout_id"] for p in batch})
                # Share-locks in the order orchestrator_heartbeat takes its exclusive ones (group, id).
                status = dict(
                    s.execute(
                        select(RolloutRow.id, RolloutRow.status)
                        .where(RolloutRow.id.in_(ids))
                        .order_by(RolloutRow.group_id, RolloutRow.id)
                        .with_for_update(read=True)
                    ).all()
                )
                now = time.time()
                good, refused = [], []
                for p in batch:
                    try:
                        rollout_id = p.value.values["rollout_id"]
                        self._check_open(rollout_id, status.get(rollout_id))
                        good.append(p)
                    except (NotFound, FailedPrecondition) as e:
                        refused.append((p, e))
                if good:
                    s.execute(insert(CallRow), [{**p.value.values, "created_at": now} for p in good])
        except Exception:
            log.debug("a batch of %d calls failed; writing them one by one", len(batch), exc_info=True)
            for p in batch:
                self._settle_alone(p)
            return
        for p in good:
            p.settle(p.value.values["id"])
        for p, e in refused:
            p.settle(error=e)

    def _write_calls_pg(self, batch: list[Pending]) -> None:
        """A batch in one prepared PostgreSQL statement (`pg_prepared`); each call it left out
        (refused, a duplicate) or a batch that failed is written again alone, for the caller's own
        outcome."""
        assert self._pg_calls is not None
        try:
            calls = [p.value for p in batch]
            inserted = self._pg_calls.insert(
                [c.values for c in calls], [c.encoded for c in calls], time.time()
            )
        except psycopg.Error:  # the database's refusal or an outage; a bug in this path is no fallback
            log.debug("a batch of %d calls failed; writing them one by one", len(batch), exc_info=True)
            inserted = set()
        for p in batch:
            if p.value.values["id"] in inserted:
                p.settle(p.value.values["id"])
            else:
                self._settle_alone(p)

    def _settle_alone(self, p: Pending) -> None:
        try:
            p.settle(self._write_call(p.value.values))
        except Exception as e:
            p.settle(error=e)

    @staticmethod
    def _check_open(rollout_id: str, status: str | None) -> None:
        """Rule 4: calls go only to a known rollout that has not ended."""
        if status is None:
            raise NotFound(f"unknown rollout {rollout_id!r}")
        if status in ENDED_ROLLOUT_STATES:
            raise FailedPrecondition(f"rollout {rollout_id} has ended ({status}); no more calls")

    # --- judgments ---

    def record_judgment(self, judgment: Judgment) -> str:
        values = validate.judgment_values(judgment)
        judgment_id = _new_id()
        with self._unique(f"a judgment of rollout {judgment.rollout_id}"), self._write() as s:
            self._rollout(s, judgment.rollout_id, lock=True)
            s.execute(insert(JudgmentRow).values(id=judgment_id, created_at=time.time(), **values))
        return judgment_id

    def get_judgment(self, rollout_id: str) -> Judgment:
        with self._read() as s:
            self._rollout(s, rollout_id)
            row = s.scalar(select(JudgmentRow).where(JudgmentRow.rollout_id == rollout_id))
            if row is None:
                raise NotFound(f"rollout {rollout_id} has no judgment")
            return rows.judgment_record(row)

    def list_calls(self, rollout_id: str) -> list[Call]:
        with self._read() as s:
            self._rollout(s, rollout_id)
            found = s.scalars(select(CallRow).where(CallRow.rollout_id == rollout_id).order_by(CallRow.seq))
            return [rows.call_record(r) for r in found]

    # --- groups ---

    def get_group(self, group_id: str) -> Group:
        """The group's rollouts (in registration order) with their calls in seq order: two queries."""
        with self._read() as s:
            members = list(
                s.scalars(
                    select(RolloutRow).where(RolloutRow.group_id == group_id).order_by(RolloutRow.group_index)
                )
            )
            if not members:
                raise NotFound(f"unknown group {group_id!r}")
            calls: dict[str, list[Call]] = {r.id: [] for r in members}
            found = s.scalars(
                select(CallRow)
                .join(RolloutRow, CallRow.rollout_id == RolloutRow.id)
                .where(RolloutRow.group_id == group_id)
                .order_by(CallRow.rollout_id, CallRow.seq)
            )
            for row in found:
                calls[row.rollout_id].append(rows.call_record(row))
            return Group(
                id=group_id,
                run_id=members[0].run_id,
                rollouts=[RolloutWithCalls(rows.rollout_record(r), calls[r.id]) for r in members],
            )

    def list_groups(self, run_id: str) -> list[GroupSummary]:
        with self._read() as s:
            self._run(s, run_id)
            found = s.scalars(
                select(GroupRow).where(GroupRow.run_id == run_id).order_by(GroupRow.created_at, GroupRow.id)
            )
            return [rows.group_summary(g) for g in found]

    def watch_groups(
        self, run_id: str, after_id: str = "", timeout_s: float | None = None
    ) -> Iterator[GroupReady]:
        """Groups of `run_id` that became ready after bus message `after_id` ("" = all), as they come.

        Ends after `timeout_s` seconds in total (None: when the caller stops iterating).
        """
        self.get_run(run_id)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        cursor = after_id
        while True:
            left = 1.0 if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return
            for message in self.bus.read(GROUPS_READY, cursor, count=100, block_s=min(left, 1.0)):
                cursor = message.id
                if message.fields.get("run_id") == run_id:
                    yield GroupReady(
                        group_id=message.fields["group_id"], run_id=run_id, message_id=message.id
                    )

    # --- checkpoints, steps, evals ---

    def record_checkpoint(self, checkpoint: Checkpoint) -> Checkpoint:
        metrics, _ = validate.json_object("metrics", checkpoint.metrics)
        row = CheckpointRow(
            run_id=checkpoint.run_id,
            version=validate.integer("version", checkpoint.version),
            step=validate.integer("step", checkpoint.step),
            uri=validate.text("uri", checkpoint.uri),
            metrics=metrics,
            created_at=time.time(),
        )
        group_ids = sorted({validate.text("group_ids[]", g) for g in checkpoint.group_ids})
        with self._unique(f"checkpoint {checkpoint.version} of run {checkpoint.run_id}"), self._write() as s:
            self._run(s, checkpoint.run_id)
            s.add(row)
            if group_ids:
                self._consume_groups(s, checkpoint.run_id, row.version, group_ids)
        record = rows.checkpoint_record(row, tuple(group_ids))
        fields = {
            "run_id": record.run_id,
            "version": str(record.version),
            "step": str(record.step),
            "uri": record.uri,
        }
        self._publish(CHECKPOINTS, fields)
        return record

    def list_checkpoints(self, run_id: str) -> list[Checkpoint]:
        with self._read() as s:
            self._run(s, run_id)
            found = s.scalars(
                select(CheckpointRow).where(CheckpointRow.run_id == run_id).order_by(CheckpointRow.version)
            )
            consumed: dict[int, list[str]] = {}
            for group_id, version in s.execute(
                select(GroupRow.id, GroupRow.consumed_version)
                .where(GroupRow.run_id == run_id, GroupRow.consumed_version.is_not(None))
                .order_by(GroupRow.id)
            ):
                consumed.setdefault(version, []).append(group_id)
            return [rows.checkpoint_record(r, tuple(consumed.get(r.version, ()))) for r in found]

    def list_unconsumed_groups(self, run_id: str) -> list[str]:
        """Ids of the run's complete groups no checkpoint has consumed yet, the earliest complete first."""
        with self._read() as s:
            self._run(s, run_id)
            return list(
                s.scalars(
                    select(GroupRow.id)
                    .where(
                        GroupRow.run_id == run_id,
                        GroupRow.ready_at.is_not(None),
                        GroupRow.consumed_version.is_(None),
                    )
                    .order_by(GroupRow.ready_at, GroupRow.id)
                )
            )

    def open_group_versions(self, run_id: str) -> dict[str, int]:
        """Per open group of the run (a rollout not ended) with a generated token recorded: the oldest
        policy version that generated one (a call's policy_version is its first token's), over the
        calls of its rollouts not failed. Groups with none yet are left out. One query, by index."""
        with self._read() as s:
            self._run(s, run_id)
            found = s.execute(
                select(GroupRow.id, func.min(CallRow.policy_version))
                .join(RolloutRow, RolloutRow.group_id == GroupRow.id)
                .join(CallRow, CallRow.rollout_id == RolloutRow.id)
                .where(
                    GroupRow.run_id == run_id,
                    GroupRow.ready_at.is_(None),
                    RolloutRow.status != "failed",
                    CallRow.n_output > 0,
                )
                .group_by(GroupRow.id)
            )
            return {group_id: int(version) for group_id, version in found}

    def reannounce_ready_groups(self) -> int:
        """Publishes `groups.ready` again for every complete, unconsumed group of a created or running
        run; returns how many. Events are published after commit, so a store killed in between
        committed a group it never announced: a store that starts calls this, so every group is
        announced at least once (consumers skip a group they already trained)."""
        with self._read() as s:
            ready = s.execute(
                select(GroupRow.id, GroupRow.run_id)
                .join(RunRow, RunRow.id == GroupRow.run_id)
                .where(
                    RunRow.status.in_(("created", "running")),
                    GroupRow.ready_at.is_not(None),
                    GroupRow.consumed_version.is_(None),
                )
                .order_by(GroupRow.ready_at, GroupRow.id)
            ).all()
        for group_id, run_id in ready:
            self._publish(GROUPS_READY, {"group_id": group_id, "run_id": run_id})
        return len(ready)

    def record_train_step(self, run_id: str, step: int, metrics: dict[str, Any]) -> None:
        metrics, _ = validate.json_object("metrics", metrics)
        row = TrainStepRow(
            run_id=run_id, step=validate.integer("step", step), metrics=metrics, created_at=time.time()
        )
        with self._unique(f"train step {step} of run {run_id}"), self._write() as s:
            self._run(s, run_id)
            s.add(row)

    def list_train_steps(self, run_id: str) -> list[TrainStep]:
        with self._read() as s:
            self._run(s, run_id)
            found = s.scalars(
                select(TrainStepRow).where(TrainStepRow.run_id == run_id).order_by(TrainStepRow.step)
            )
            return [rows.train_step_record(r) for r in found]

    def record_eval(
        self, run_id: str, version: int, suite: str, harness: str, metrics: dict[str, Any]
    ) -> None:
        metrics, _ = validate.json_object("metrics", metrics)
        row = EvalRow(
            run_id=run_id,
            version=validate.integer("version", version),
            suite=validate.text("suite", suite),
            harness=validate.text("harness", harness),
            metrics=metrics,
            created_at=time.time(),
        )
        with self._write() as s:
            self._run(s, run_id)
            s.add(row)

    def list_evals(self, run_id: str) -> list[EvalRecord]:
        with self._read() as s:
            self._run(s, run_id)
            rows = s.scalars(select(EvalRow).where(EvalRow.run_id == run_id).order_by(EvalRow.id))
            return [EvalRecord(r.run_id, r.version, r.suite, r.harness, dict(r.metrics)) for r in rows]

    # --- internals ---

    @contextmanager
    def _db_errors(self) -> Iterator[None]:
        """Database failures as typed errors: unreachable (or locked past the busy timeout) is Unavailable."""
        try:
            yield
        except (exc.OperationalError, exc.InterfaceError) as e:
            raise Unavailable(f"store database unavailable: {e.orig or e}") from e
        except exc.DataError as e:  # a value the checks let through but the database refuses
            raise InvalidArgument(f"the store database refused a value: {e.orig or e}") from e

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """One write transaction: commits on success, rolls everything back on any error."""
        with self._db_errors(), Session(self._engine, expire_on_commit=False) as s, s.begin():
            yield s

    @contextmanager
    def _read(self) -> Iterator[Session]:
        """One read transaction on a consistent snapshot (see `database.read_only`)."""
        with self._db_errors(), Session(self._reader) as s, s.begin():
            yield s

    @contextmanager
    def _unique(self, what: str) -> Iterator[None]:
        try:
            yield
        except exc.IntegrityError as e:
            raise AlreadyExists(f"{what} is recorded already") from e

    def _publish(self, stream: str, fields: dict[str, str]) -> None:
        try:
            self.bus.publish(stream, fields)
        except Exception:
            # The database has committed; only the notification is lost. Say so loudly.
            log.exception("committed, but publishing %s %s failed", stream, fields)
            raise

    @staticmethod
    def _run(s: Session, run_id: str) -> RunRow:
        row = s.get(RunRow, run_id) if isinstance(run_id, str) else None
        if row is None:
            raise NotFound(f"unknown run {run_id!r}")
        return row

    @staticmethod
    def _rollout(s: Session, rollout_id: str, lock: bool = False) -> RolloutRow:
        row = (
            s.get(RolloutRow, rollout_id, with_for_update=True if lock else None)
            if isinstance(rollout_id, str)
            else None
        )
        if row is None:
            raise NotFound(f"unknown rollout {rollout_id!r}")
        return row

    @staticmethod
    def _grow_group(s: Session, run_id: str, group_id: str, size: int, now: float) -> int:
        """Creates the group or adds `size` rollouts to it, under its row lock; returns its old size."""
        dialect_insert = postgresql.insert if s.get_bind().dialect.name == "postgresql" else sqlite.insert
        s.execute(
            dialect_insert(GroupRow)
            .values(id=group_id, run_id=run_id, size=0, ended=0, ready_at=None, created_at=now)
            .on_conflict_do_nothing(index_elements=["id"])
        )
        group = s.get(GroupRow, group_id, with_for_update=True, populate_existing=True)
        assert group is not None, "the group row was just inserted"
        if group.run_id != run_id:
            raise InvalidArgument(f"group {group_id!r} belongs to run {group.run_id}, not {run_id}")
        if group.ready_at is not None:
            raise FailedPrecondition(
                f"group {group_id!r} is complete (all its rollouts ended); use a new group id"
            )
        group.size += size
        return group.size - size

    @staticmethod
    def _consume_groups(s: Session, run_id: str, version: int, group_ids: list[str]) -> None:
        """Marks complete, unconsumed groups of the run consumed by `version`; all of them or none (rule 5)."""
        # One UPDATE row-locks the groups (PostgreSQL re-checks the WHERE after a concurrent commit),
        # so two trainers racing for one group cannot both consume it.
        done = s.execute(
            update(GroupRow)
            .where(
                GroupRow.id.in_(group_ids),
                GroupRow.run_id == run_id,
                GroupRow.ready_at.is_not(None),
                GroupRow.consumed_version.is_(None),
            )
            .values(consumed_version=version)
        ).rowcount
        if done == len(group_ids):
            return
        found = {
            g.id: g
            for g in s.scalars(select(GroupRow).where(GroupRow.id.in_(group_ids), GroupRow.run_id == run_id))
        }
        problems = []
        for group_id in group_ids:
            g = found.get(group_id)
            if g is None:
                problems.append(f"{group_id!r} is not a group of run {run_id}")
            elif g.ready_at is None:
                problems.append(f"{group_id!r} is not complete")
            elif g.consumed_version != version:
                problems.append(f"{group_id!r} was consumed by checkpoint {g.consumed_version}")
        raise FailedPrecondition(f"checkpoint {version} cannot consume its groups: {'; '.join(problems[:5])}")

    @staticmethod
    def _count_ended(s: Session, group_id: str, now: float) -> bool:
        """Counts one more ended rollout; True for the one transaction that ends the group."""
        # One UPDATE: on PostgreSQL it row-locks the group until commit, so concurrent finishers
        # queue here and each reads the count including all earlier ones (see rule 3 above).
        s.execute(update(GroupRow).where(GroupRow.id == group_id).values(ended=GroupRow.ended + 1))
        ended, size = s.execute(select(GroupRow.ended, GroupRow.size).where(GroupRow.id == group_id)).one()
        if ended < size:
            return False
        s.execute(update(GroupRow).where(GroupRow.id == group_id).values(ready_at=now))
        return True
