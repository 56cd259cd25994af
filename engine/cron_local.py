"""``chaosflow cron FILE``: run CronWorkflows locally on the simulated cluster and the virtual clock.

The CronWorkflow's children run on a :class:`~engine.manager.WorkflowManager`; the cron itself is a
:class:`~engine.cron.CronDriver` whose backend is the manager (children = the manager's runs
labelled with the cron) and whose timer is the engine's trigger, so on the virtual clock days of
schedule take seconds. ``--until`` stops at a virtual time; with ``--state`` everything (children,
the cron status, the simulated cluster, the clock) is checkpointed in SQLite in one transaction,
and running the command again against the same state continues where it stopped — a tick whose
child exists is never submitted again. ``--start`` later than the stored clock simulates downtime.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from engine.clock import VIRTUAL_EPOCH, VirtualClock, parse_rfc3339, rfc3339
from engine.cron import (
    LABEL_CRON,
    AbortChild,
    Action,
    ChildInfo,
    CronDriver,
    CronWorkflow,
    CronWorkflowStatus,
    DeleteChild,
    SkipTick,
    SubmitChild,
    label_value,
)
from engine.errors import InputError
from engine.manager import WorkflowManager
from engine.model import Workflow
from engine.runtime import WorkflowRun
from engine.simworld import (
    ANNOTATION_SIM_WORLD,
    SimWorldRequest,
    build_sim_world,
    restore_sim_world,
    sim_world_of,
)
from engine.store import SQLiteStore
from triggers.cron import ScheduleError, ScheduleSet
from triggers.operable import OperableTrigger

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_INVALID = 2

DEFAULT_UNTIL = "1d"


@dataclass
class CronRunOptions:
    seed: int | None = None
    output: str = "text"  # text | json | yaml
    state: str | None = None
    progress: bool = True
    until: str | None = None  # a duration from the start of this invocation, or an RFC 3339 time
    start: str | None = None  # virtual time to start at (later than a stored clock = downtime)
    next: int | None = None  # only print the next N fire times
    world: str | None = None
    file: str | None = None  # where the CronWorkflows came from (for messages)
    checkpoint_interval: float = 0.25
    crash_after_events: int | None = None  # testing hook: os._exit(137) after N engine events
    metrics: Any = None  # an engine.metrics.Metrics: cron_run_triggered / cron_run_skipped
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)


# --- times -----------------------------------------------------------------------------------------
_DAYS = re.compile(r"^(?P<days>[0-9]+(?:\.[0-9]+)?)d(?P<rest>.*)$")


def parse_time(text: str) -> float:
    """An RFC 3339 time (or a date, midnight UTC); naive times are UTC."""
    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InputError("--start/--until", None, f"invalid time {text!r} (expected RFC 3339)") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def parse_until(text: str, now: float) -> float:
    """``--until``: a duration from ``now`` (Go style plus days: ``3d``, ``1d12h``) or a time."""
    from engine.duration import DurationError, parse_duration

    src = text.strip()
    m = _DAYS.match(src)
    try:
        if m:
            rest = m.group("rest")
            return now + float(m.group("days")) * 86400 + (parse_duration(rest) if rest else 0.0)
        if re.match(r"^[0-9]{4}-[0-9]{2}-[0-9]{2}", src):
            return parse_time(src)
        return now + parse_duration(src)
    except DurationError as e:
        raise InputError("--until", None, f"{e} (or an RFC 3339 time)") from None


def _local(t: float, sched: ScheduleSet) -> str:
    return datetime.fromtimestamp(t, sched.timezone).strftime("%Y-%m-%d %H:%M:%S %Z")


def _status_key(cron: CronWorkflow) -> str:
    return f"cron:{cron.key}"


# --- the backend: children are the manager's runs --------------------------------------------------
class ManagerCronBackend:
    """A :class:`~engine.cron.CronBackend` on a WorkflowManager (and its SQLite store)."""

    def __init__(self, manager: WorkflowManager, store: SQLiteStore | None = None) -> None:
        self.manager = manager
        self.store = store

    def children_runs(self, cron: CronWorkflow) -> list[WorkflowRun]:
        label = label_value(cron.name)
        return [
            r
            for r in self.manager.runs.values()
            if r.namespace == cron.namespace and r.workflow.metadata.labels.get(LABEL_CRON) == label
        ]

    def list_children(self, cron: CronWorkflow) -> dict[str, ChildInfo]:
        return {r.name: ChildInfo(r.phase.value, r.finish_time) for r in self.children_runs(cron)}

    def submit(self, workflow: Workflow) -> None:
        key = f"{workflow.namespace}/{workflow.name}"
        if key in self.manager.runs:
            return  # AlreadyExists: done
        self.manager.submit(workflow)

    def abort(self, namespace: str, name: str, message: str) -> None:
        run = self.manager.runs.get(f"{namespace}/{name}")
        if run is not None and not run.phase.finished:
            self.manager.abort(run.key, message)

    def delete(self, namespace: str, name: str) -> None:
        key = f"{namespace}/{name}"
        run = self.manager.runs.get(key)
        if run is None or not run.phase.finished:
            return
        del self.manager.runs[key]
        if self.store is not None:
            self.store.delete(key)


# --- the local runner -----------------------------------------------------------------------------
@dataclass
class _Seen:
    """What this invocation saw of one child (for the report)."""

    name: str
    cron: str
    scheduled: float
    phase: str = "Running"
    start: float | None = None
    finish: float | None = None
    note: str = ""
    deleted: bool = False
    replaced: bool = False


def _read_state(path: str | None) -> dict[str, Any] | None:
    if not path or not Path(path).exists():
        return None
    store = SQLiteStore(path)
    try:
        clock = store.get_meta("clock")
        if clock is None:
            return None
        return {
            "clock": float(clock),
            "sim": store.get_meta("sim"),
            "options": store.get_meta("options", {}) or {},
        }
    finally:
        store.close()


class LocalCronRunner:
    def __init__(self, crons: list[CronWorkflow], opts: CronRunOptions) -> None:
        from actors.sim.playground import SimWorld

        self.crons = crons
        self.opts = opts
        request = self._requested_world()  # before anything is written
        stored = _read_state(opts.state)
        self.resumed = stored is not None
        seed = opts.seed
        if seed is None:
            seed = int(stored["options"].get("seed", 0)) if stored else (crons[0].spec.workflowSpec.seed or 0)
        start = stored["clock"] if stored else VIRTUAL_EPOCH
        if opts.start:
            t = parse_time(opts.start)
            if stored and t < start:
                print(
                    f"note: --start {opts.start} is before the stored clock {rfc3339(start)}; "
                    "the virtual clock never goes backwards",
                    file=opts.err,
                )
            start = max(start, t) if stored else t
        self.start = start
        self.until = parse_until(opts.until or DEFAULT_UNTIL, start)
        self.clock = VirtualClock(start)
        self.trigger = OperableTrigger(self.clock)
        self.world = SimWorld(self.clock, self.trigger, seed=seed)
        self.store: SQLiteStore | None = None
        if opts.state:
            self.store = SQLiteStore(opts.state, min_interval=opts.checkpoint_interval)
        self.manager = WorkflowManager(self.world.playground, self.clock, self.trigger, self.store)
        self.backend = ManagerCronBackend(self.manager, self.store)
        statuses: dict[str, Any] = {}
        self.sim_world = self._setup_world(stored, request)
        if stored:
            assert self.store is not None
            for run in self.store.load_all():
                self.manager.adopt(run)
            statuses = {c.key: self.store.get_meta(_status_key(c)) for c in crons}
        self.drivers: list[CronDriver] = []
        for cron in crons:
            raw = statuses.get(cron.key)
            status = CronWorkflowStatus.model_validate(raw) if raw else None
            driver = CronDriver(cron, self.backend, status)
            driver.listeners.append(self._on_action)
            self.drivers.append(driver)
        if self.store is not None:
            store = self.store
            store.snapshots["sim"] = self.world.snapshot
            store.snapshots["clock"] = self.clock.now
            for d in self.drivers:
                store.snapshots[_status_key(d.cron)] = self._status_getter(d)
            meta: dict[str, Any] = {"seed": seed}
            if self.sim_world is not None:
                meta["simWorld"] = self.sim_world.to_dict()
            store.put_meta("options", meta)
        self.seen: dict[str, _Seen] = {}
        self.submitted: list[str] = []  # children submitted by this invocation, in order
        self._wakes: set[float] = set()
        self._resync = False
        self._stopped = False
        self.manager.workflow_listeners.append(self._on_workflow)

    def _requested_world(self) -> SimWorldRequest | None:
        """The world the children ask for (``chaosflow.io/sim-world`` in
        ``spec.workflowMetadata.annotations``); ValidationFailed when invalid."""
        filename = self.opts.file or "CronWorkflow"
        multi = len(self.crons) > 1
        return sim_world_of(
            [
                (
                    (c.spec.workflowMetadata.annotations if c.spec.workflowMetadata else {}),
                    f"{filename} ({c.key})" if multi else filename,
                    ("spec", "workflowMetadata", "annotations"),
                )
                for c in self.crons
            ]
        )

    def _setup_world(
        self, stored: dict[str, Any] | None, request: SimWorldRequest | None
    ) -> SimWorldRequest | None:
        """The simulated cluster: the world file, plus the requested world, built once for the
        whole run: the children share it as they would share a real cluster. From ``--state`` the
        stored world is restored with its controllers."""
        filename = self.opts.file or "CronWorkflow"
        if not stored:
            self.world.load_world_file(self.opts.world)
            if request is not None:
                build_sim_world(self.world, request)
            return request
        raw = stored["options"].get("simWorld")
        had = SimWorldRequest.from_dict(raw) if raw else None
        if stored["sim"] is not None:
            restore_sim_world(self.world, stored["sim"], had)
        elif had is not None:  # stopped before the first checkpoint of the world
            build_sim_world(self.world, had)
        if request is not None and had is not None and request != had:
            raise InputError(
                filename,
                ("spec", "workflowMetadata", "annotations", ANNOTATION_SIM_WORLD),
                f"differs from the simulated world of the state {self.opts.state} "
                f"({had.annotation()}); the children share that world: use a new --state",
            )
        if request is not None and had is None:  # the state has no such world yet: add it now
            build_sim_world(self.world, request)
        return request or had

    @staticmethod
    def _status_getter(d: CronDriver) -> Any:
        return lambda: d.status.model_dump(mode="json", exclude_none=True)

    # --- events -----------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        if self.opts.progress and self.opts.output == "text":
            print(f"[{rfc3339(self.clock.now())}] {text}", file=self.opts.err)

    def _on_action(self, cron: CronWorkflow, a: Action, now: float) -> None:
        sched = self._driver(cron).controller.schedules
        assert sched is not None
        if isinstance(a, SubmitChild):
            self.seen[a.name] = _Seen(a.name, label_value(cron.name), a.scheduled_time, start=now)
            self.submitted.append(a.name)
            late = " (catch-up)" if a.catch_up else ""
            self._say(f"{cron.name}: submit {a.name} for {_local(a.scheduled_time, sched)}{late}")
            if self.opts.metrics is not None:
                self.opts.metrics.cron_run_triggered(cron.spec.concurrencyPolicy)
        elif isinstance(a, SkipTick):
            if self.opts.metrics is not None:
                self.opts.metrics.cron_run_skipped(cron.spec.concurrencyPolicy, a.reason.value, a.count)
            n = f" x{a.count}" if a.count > 1 else ""
            self._say(
                f"{cron.name}: skip {_local(a.scheduled_time, sched)}{n} ({a.reason.value}: {a.message})"
            )
        elif isinstance(a, AbortChild):
            s = self.seen.get(a.name)
            if s is not None:
                s.replaced = True
                s.note = a.message
            self._say(f"{cron.name}: abort {a.name} ({a.message})")
        elif isinstance(a, DeleteChild):
            s = self.seen.get(a.name)
            if s is not None:
                s.deleted = True
            self._say(f"{cron.name}: delete {a.name} ({a.reason})")

    def _driver(self, cron: CronWorkflow) -> CronDriver:
        return next(d for d in self.drivers if d.cron is cron)

    def _on_workflow(self, run: WorkflowRun) -> None:
        if LABEL_CRON not in run.workflow.metadata.labels or not run.phase.finished:
            return
        s = self.seen.get(run.name)
        if s is None:  # started in an earlier invocation
            from engine.cron import ANNOTATION_SCHEDULED

            ann = run.workflow.metadata.annotations.get(ANNOTATION_SCHEDULED)
            s = self.seen[run.name] = _Seen(
                run.name, run.workflow.metadata.labels[LABEL_CRON], parse_rfc3339(ann) if ann else 0.0
            )
            s.start = run.start_time
        s.phase, s.finish = run.phase.value, run.finish_time
        if run.message and not s.note:
            s.note = run.message
        self._say(f"{run.name}: {run.phase.value}{f' ({run.message})' if run.message else ''}")
        if not self._resync:  # update the status (counters, history) right away
            self._resync = True
            self.trigger.call_at(self.clock.now(), self._do_resync)

    def _do_resync(self) -> None:
        self._resync = False
        self._sync_all()

    def _wake(self, at: float) -> None:
        self._wakes.discard(at)
        self._sync_all()

    def _sync_all(self) -> None:
        if self._stopped:
            return
        now = self.clock.now()
        for d in self.drivers:
            rec = d.sync(now)
            nxt = rec.next_wake
            if nxt is not None and nxt <= self.until and nxt not in self._wakes:
                self._wakes.add(nxt)
                self.trigger.call_at(nxt, functools.partial(self._wake, nxt))
        if self.store is not None:
            self.store.save([])

    def _stop(self) -> None:
        self._sync_all()  # ticks due exactly at --until still run
        self._stopped = True

    # --- the loop ---------------------------------------------------------------------------------
    def run(self) -> int:
        mgr = self.manager
        wall0 = time.perf_counter()
        self.trigger.call_at(self.until, self._stop)
        self._sync_all()
        limit = self.opts.crash_after_events
        while not self._stopped:
            budget = None if limit is None else max(0, limit - mgr.events)
            mgr.run(until=lambda: self._stopped, max_events=budget)
            if limit is not None and mgr.events >= limit:
                os._exit(137)  # simulated crash: nothing beyond the last checkpoint is written
            if self._stopped:
                break
            if not self.trigger.advance():
                break
        mgr.flush()
        if self.store is not None:
            self.store.flush()
        wall = time.perf_counter() - wall0
        self._report(wall)
        mgr.close()
        failed = [s for s in self.seen.values() if s.phase == "Failed" and not s.replaced]
        return EXIT_FAILED if failed else EXIT_OK

    # --- output -----------------------------------------------------------------------------------
    def children_objects(self) -> list[dict[str, Any]]:
        objs: list[dict[str, Any]] = []
        for d in self.drivers:
            runs = sorted(self.backend.children_runs(d.cron), key=lambda r: r.name)
            objs += [r.to_object() for r in runs]
        return objs

    def _report(self, wall: float) -> None:
        opts = self.opts
        if opts.output in ("json", "yaml"):
            items = [d.cron.to_object(d.status) for d in self.drivers] + self.children_objects()
            doc = {"apiVersion": "v1", "kind": "List", "items": items}
            if opts.output == "json":
                print(json.dumps(doc, indent=2), file=opts.out)
            else:
                from engine.yamlio import dump_yaml

                print(dump_yaml(doc), file=opts.out)
            return
        out = opts.out
        for d in self.drivers:
            cron, st = d.cron, d.status
            sched = d.controller.schedules
            spec = cron.spec
            tz = spec.timezone or "UTC"
            print(
                f"CronWorkflow {cron.key} {st.phase}: {' | '.join(spec.all_schedules())} ({tz}), "
                f"concurrencyPolicy {spec.concurrencyPolicy}, catchUp {spec.catchUp}",
                file=out,
            )
            print(
                f"  succeeded {st.succeeded}, failed {st.failed}, skipped {st.skipped}, active {len(st.active)}; "
                f"last scheduled {st.lastScheduledTime or '-'}, last successful {st.lastSuccessfulTime or '-'}",
                file=out,
            )
            if st.lastSkipped is not None:
                ls = st.lastSkipped
                print(f"  last skipped {ls.scheduledTime}: {ls.reason} — {ls.message}", file=out)
            m = d.controller.metrics
            skipped = ", ".join(f"{k} {v}" for k, v in sorted(m.skipped.items())) or "none"
            print(
                f"  this run: triggered {m.triggered} ({m.triggered_catch_up} catch-up), skipped {skipped}, "
                f"replaced {m.replaced}, deleted {m.deleted}",
                file=out,
            )
            rows = sorted(
                (s for s in self.seen.values() if s.cron == label_value(cron.name)), key=lambda s: s.scheduled
            )
            for s in rows:
                when = _local(s.scheduled, sched) if sched else rfc3339(s.scheduled)
                took = ""
                if s.start is not None and s.finish is not None:
                    took = f" in {s.finish - s.start:g}s"
                tags = [
                    t for t, on in (("replaced", s.replaced), ("deleted by history limit", s.deleted)) if on
                ]
                extra = f" [{', '.join(tags)}]" if tags else ""
                note = f" — {s.note}" if s.note and s.phase == "Failed" else ""
                print(f"  {s.name:<40} {when}  {s.phase}{took}{extra}{note}", file=out)
            if sched is not None:
                nxt = sched.next_after(self.clock.now())
                print(f"  next: {_local(nxt, sched) if nxt is not None else 'never'}", file=out)
        print(
            f"virtual time {rfc3339(self.start)} -> {rfc3339(self.clock.now())}; "
            f"{len(self.manager.runs)} workflow(s) kept, {self.manager.transitions} node transitions, "
            f"{self.manager.events} events, wall {wall:.3f}s",
            file=out,
        )


def print_upcoming(crons: list[CronWorkflow], opts: CronRunOptions) -> int:
    start = parse_time(opts.start) if opts.start else VIRTUAL_EPOCH
    n = opts.next or 0
    for cron in crons:
        try:
            sched = ScheduleSet(cron.spec.all_schedules(), cron.spec.timezone)
        except ScheduleError as e:  # pragma: no cover - rejected when loading
            print(f"{cron.key}: {e}", file=opts.err)
            return EXIT_INVALID
        print(f"{cron.key}: next {n} after {rfc3339(start)}", file=opts.out)
        for t in sched.upcoming(start, n):
            print(f"  {rfc3339(t)}  {_local(t, sched)}", file=opts.out)
    return EXIT_OK


def run_cron_local(crons: list[CronWorkflow], opts: CronRunOptions) -> int:
    if opts.next:
        return print_upcoming(crons, opts)
    return LocalCronRunner(crons, opts).run()


# --- the command line -------------------------------------------------------------------------------
def add_cron_parser(sub: Any, add_output: Any) -> None:
    """``chaosflow cron`` (called from ``engine.cli.build_parser``)."""
    p = sub.add_parser(
        "cron",
        help="run CronWorkflow(s) on the simulated cluster with the virtual clock, until a virtual time",
        description="Run the CronWorkflow(s) in FILE (kind CronWorkflow, short name cwf): every tick of "
        "its schedules creates a child Workflow named <cron>-<unix scheduled time>, run on the embedded "
        "simulated cluster with a virtual clock (days take seconds). The run stops at --until; with "
        "--state it is checkpointed in SQLite and the same command continues it later without running "
        "a tick twice (a --start later than the stored clock simulates downtime: missed ticks are "
        "caught up by spec.catchUp within spec.startingDeadlineSeconds). Exit 0, or 1 when a child "
        "failed (other than one aborted by concurrencyPolicy Replace), 2 on invalid input. "
        "See docs/cron.md.",
    )
    p.add_argument("file", metavar="FILE")
    p.add_argument(
        "--until",
        metavar="DURATION|TIME",
        default=None,
        help=f"stop at this virtual time: a duration from the start of this invocation (90m, 36h, 3d, "
        f"1d12h) or an RFC 3339 time (default {DEFAULT_UNTIL})",
    )
    p.add_argument(
        "--start",
        metavar="TIME",
        default=None,
        help="virtual time to start at (RFC 3339; default 2026-01-01T00:00:00Z or the stored clock)",
    )
    p.add_argument("--state", metavar="PATH", help="SQLite file: children, cron status, sim cluster, clock")
    p.add_argument(
        "--seed", type=int, default=None, help="seed of the simulated cluster (default: spec seed or 0)"
    )
    p.add_argument("--next", type=int, default=None, metavar="N", help="only print the next N fire times")
    p.add_argument("--world", metavar="FILE", help="YAML objects to start the simulated cluster with")
    p.add_argument(
        "--checkpoint",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="with --state: write a checkpoint at most every SECONDS of wall time (0 = every engine tick)",
    )
    add_output(p)


def cmd_cron(args: Any) -> int:
    from engine.cron import load_cron_workflow_file

    crons = load_cron_workflow_file(args.file)
    crash = os.environ.get("CHAOSFLOW_CRASH_AFTER_EVENTS")
    opts = CronRunOptions(
        seed=args.seed,
        output=args.output,
        state=args.state,
        progress=not args.quiet,
        until=args.until,
        start=args.start,
        next=args.next,
        world=args.world,
        file=args.file,
        checkpoint_interval=args.checkpoint,
        crash_after_events=int(crash) if crash else None,
    )
    return run_cron_local(crons, opts)
