"""megatest's logging, live metrics and report.

:class:`MegatestRecorder` listens to the engine (``attach(manager)``): as a phase listener it logs
every action's start and end (rv, action, parameters, result, duration); as an observation
listener it logs each condition change the volume-checker's watch sees, when it sees it (rv,
condition, expected, observed, reason, message, the running transition count), and each condition
of one of the RV's replicas that turns False or back (``rvr condition``: rv, rvr, condition,
reason, message; not part of the RV's transition counts). Every line carries
``at``, the run's clock (virtual on the sim). With a :class:`~engine.metrics.Metrics` it feeds the
megatest figures live (condition transitions, volumes created and gone, incidents, actions), and it
collects the final report (per-RV transition counts, incidents, actions, RVs created/deleted).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from engine.clock import rfc3339
from engine.phases import NodePhase, StopReason

if TYPE_CHECKING:
    from collections.abc import Callable

    from engine.manager import WorkflowManager
    from engine.metrics import Metrics
    from engine.phases import Observation
    from engine.runtime import Node, WorkflowRun

log = logging.getLogger("chaosflow.megatest")

#: leaf templates that are the seed's "actions"
ACTION_KINDS = frozenset({"Resource", "Chaos", "Wait", "Workflow"})
#: template -> incident type
INCIDENTS = {
    "chaos-blocking-everything": "blocking-everything",
    "chaos-blocking-drbd": "blocking-drbd",
    "chaos-split-brain": "split-brain",
    "chaos-losses": "losses",
    "chaos-latency": "latency",
    "chaos-vm-reboot": "vm-reboot",
    "pod-destroyer-agent-kill": "pod-destroy-agent",
    "pod-destroyer-controller-kill": "pod-destroy-controller",
}
CONDITIONS = ("IOReady", "Quorum")
#: the StatusCheck template of the seed's volume-checker: the RV's IOReady/Quorum transitions
CHECKER = "volume-checker-rv"
#: the Wait template of the volume-checker watching the RV's replicas ("condition rvr == false")
RVR_WATCH = "volume-checker-rvrs"
#: replica conditions not judged: Attached follows the attacher (a Secondary is Attached=False)
RVR_IGNORED_CONDITIONS = frozenset({"Attached"})


@dataclass
class VolumeRecord:
    rv: str
    storage_class: str = ""
    created: bool = False
    deleted: bool = False
    checked: bool = False
    transitions: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CONDITIONS, 0))
    #: became ready (IOReady and Quorum) before its lifetime ended
    ready: bool = False
    #: replica condition type -> flips to or from False (not part of the verdict)
    rvr_flips: Counter[str] = field(default_factory=Counter)
    phase: str = "Running"
    message: str = ""

    @property
    def broken(self) -> list[str]:
        return [c for c in CONDITIONS if self.transitions.get(c, 0) % 2 == 1]


@dataclass
class ActionStats:
    count: int = 0
    errors: int = 0
    total: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "errors": self.errors,
            "meanSeconds": round(self.total / self.count, 3) if self.count else 0.0,
        }


def _rv_of(run: WorkflowRun) -> str:
    for p in run.workflow.spec.parameters:
        if p.name == "rv":
            return str(p.value or "")
    return ""


def _param(run: WorkflowRun, name: str) -> str:
    for p in run.workflow.spec.parameters:
        if p.name == name:
            return str(p.value or "")
    return ""


def _params_of(node: Node) -> dict[str, Any]:
    r = node.state.get("rendered") or {}
    out: dict[str, Any] = {}
    params = r.get("chaos.params")
    if isinstance(params, dict):
        out.update(
            {k: v for k, v in params.items() if k not in ("vmNamespace", "testCluster", "parentCluster")}
        )
    manifest = r.get("resource.manifest") or node.state.get("manifest")
    if isinstance(manifest, dict):
        out["object"] = f"{manifest.get('kind')}/{(manifest.get('metadata') or {}).get('name')}"
    return out


#: why a node was stopped (``StopRequest.reason``): its action did not end by itself
STOP_REASONS = frozenset(r.value for r in StopReason if r is not StopReason.CHILD_FAILED)


def _result(node: Node) -> dict[str, Any]:
    keep = (
        "variant",
        "vm",
        "vms",
        "ports",
        "groupA",
        "groupB",
        "rvr",
        "type",
        "node",
        "killed",
        "wanted",
        "count",
        "active",
        "skipped",
        "unfinished",
        "vmop",
        "deleted",
        "step",
        "size",
        "selected",
    )
    return {k: node.outputs[k] for k in keep if k in node.outputs}


class MegatestRecorder:
    """Attach with :meth:`attach` (a phase listener and an observation listener of the manager).
    ``metrics``: fed live with the megatest figures (``Metrics.megatest_*``)."""

    def __init__(self, main: str, metrics: Metrics | None = None) -> None:
        self.main = main
        self.metrics = metrics
        self.volumes: dict[str, VolumeRecord] = {}
        self.actions: dict[str, ActionStats] = {}
        self.incidents: Counter[str] = Counter()
        self.skipped_reboots = 0
        self.cleanup_failures: list[str] = []
        self._now: Callable[[], float] | None = None
        #: (workflow, node) of a replica watch -> rvr uid -> (resourceVersion, {condition: status})
        self._rvrs: dict[tuple[str, str], dict[str, tuple[str, dict[str, str]]]] = {}

    def attach(self, manager: WorkflowManager) -> MegatestRecorder:
        self._now = manager.clock.now
        manager.phase_listeners.append(self)
        manager.observation_listeners.append(self.observe)
        return self

    def _at(self) -> str | None:
        return rfc3339(self._now()) if self._now is not None else None

    def observe(self, run: WorkflowRun, node: Node, ob: Observation, now: float) -> None:
        """The checker's watch saw a condition change (``templates/statuscheck.py``): log it and
        count it now, not when the checker ends. The replica watch (``templates/wait.py``) saw the
        RV's replicas change: log the conditions that turned False or back."""
        if node.template != CHECKER:
            if node.template == RVR_WATCH and ob.what == "objectsChanged":
                self._observe_rvrs(run, node, ob, now)
            return
        d = ob.data
        cond = d.get("condition")
        rec = self.volume(run)
        rv = rec.rv
        if cond:
            rec.transitions[cond] = int(d.get("transitions", 0))
            if self.metrics is not None:
                self.metrics.megatest_condition_transition(rv, cond)
        if log.isEnabledFor(logging.INFO):
            log.info(
                "watch",
                extra={
                    "rv": rv,
                    "condition": cond or "exists",
                    "expected": d.get("expected"),
                    "observed": d.get("observed"),
                    "reason": d.get("reason", ""),
                    "detail": d.get("message", ""),
                    "transitions": d.get("transitions"),
                    "at": rfc3339(now),
                    "workflow": run.name,
                },
            )

    def _observe_rvrs(self, run: WorkflowRun, node: Node, ob: Observation, now: float) -> None:
        """A condition of a replica flips when its status turns ``False`` or stops being ``False``;
        a condition is assumed True until seen (like the RV's), so a replica first seen with a
        False condition (a new one still being set up) flips once, and back when it is fixed.
        Unchanged replicas (same resourceVersion) are skipped; gone ones are forgotten (by uid: a
        replica name is reused once its owner is gone)."""
        rvrs = (ob.data.get("objects") or {}).get("rvrs")
        if not isinstance(rvrs, list):
            return
        known = self._rvrs.setdefault((run.key, node.name), {})
        current: dict[str, tuple[str, dict[str, str]]] = {}
        rec: VolumeRecord | None = None
        for r in rvrs:
            meta = r.get("metadata") or {}
            name = str(meta.get("name") or "")
            uid = str(meta.get("uid") or name)
            version = str(meta.get("resourceVersion") or "")
            prev = known.get(uid)
            if prev is not None and version and prev[0] == version:
                current[uid] = prev
                continue
            statuses = dict(prev[1]) if prev is not None else {}
            for c in (r.get("status") or {}).get("conditions") or ():
                ctype = str(c.get("type"))
                if ctype in RVR_IGNORED_CONDITIONS:
                    continue
                status = str(c.get("status"))
                was = statuses.get(ctype, "True")
                statuses[ctype] = status
                if (status == "False") == (was == "False"):
                    continue
                if rec is None:
                    rec = self.volume(run)
                rec.rvr_flips[ctype] += 1
                if log.isEnabledFor(logging.INFO):
                    spec = r.get("spec") or {}
                    log.info(
                        "rvr condition",
                        extra={
                            "rv": rec.rv,
                            "rvr": name,
                            "replicaType": spec.get("type", ""),
                            "node": spec.get("nodeName", ""),
                            "condition": ctype,
                            "expected": "True",
                            "observed": status,
                            "reason": str(c.get("reason") or ""),
                            "detail": str(c.get("message") or ""),
                            "at": rfc3339(now),
                            "workflow": run.name,
                        },
                    )
            current[uid] = (version, statuses)
        self._rvrs[(run.key, node.name)] = current

    def volume(self, run: WorkflowRun) -> VolumeRecord:
        rv = _rv_of(run)
        rec = self.volumes.get(rv)
        if rec is None:
            rec = self.volumes[rv] = VolumeRecord(rv, _param(run, "sc"))
        return rec

    def __call__(self, run: WorkflowRun, node: Node, old: NodePhase) -> None:
        tmpl = node.template
        rv = _rv_of(run)
        if (
            (node.kind in ACTION_KINDS or tmpl == "volume-checker")
            and tmpl != RVR_WATCH
            and old is NodePhase.INIT
            and not node.phase.finished
            and log.isEnabledFor(logging.INFO)
        ):
            log.info(
                "action started",
                extra={
                    "rv": rv,
                    "action": tmpl,
                    "parameters": _params_of(node),
                    "at": self._at(),
                    "workflow": run.name,
                },
            )
        if not node.phase.finished:
            return
        took = (node.finish_time or 0.0) - (node.start_time or node.finish_time or 0.0)
        ok = node.phase is NodePhase.SUCCEED
        if tmpl == CHECKER:  # its changes were logged and counted live (observe); the final counts
            rec = self.volume(run)
            counts = node.outputs.get("conditionTransitions") or {}
            rec.checked = True
            rec.transitions = {c: int(counts.get(c, 0)) for c in CONDITIONS}
        if tmpl == RVR_WATCH:  # a watcher, not an action: it ends with the checker
            self._rvrs.pop((run.key, node.name), None)
            return
        if tmpl == "volume-wait-ready" and ok and node.reason not in STOP_REASONS:
            self.volume(run).ready = True  # (not stopped by the end of the lifetime)
        if node.kind not in ACTION_KINDS:
            if tmpl == "volume-main":
                rec = self.volume(run)
                rec.phase, rec.message = node.phase.value, node.message
            return
        stats = self.actions.setdefault(tmpl, ActionStats())
        stats.count += 1
        stats.total += took
        if not ok:
            stats.errors += 1
        level = logging.INFO if ok else logging.WARNING
        if log.isEnabledFor(level):
            self._log_end(run, node, level, rv, tmpl, took)
        if self.metrics is not None:
            self.metrics.megatest_action(tmpl, took, ok)
        self._count(run, node, rv, tmpl, ok)

    def _log_end(self, run: WorkflowRun, node: Node, level: int, rv: str, tmpl: str, took: float) -> None:
        result = _result(node)
        log.log(
            level,
            "action finished",
            extra={
                "rv": rv,
                "action": tmpl,
                "parameters": _params_of(node),
                # stopped (the lifetime, the end signal) before it ended by itself
                "result": "Stopped" if node.reason in STOP_REASONS else node.phase.value,
                "outputs": result,
                "detail": node.message,
                "duration": round(took, 3),
                "at": self._at(),
                "workflow": run.name,
            },
        )

    def _count(self, run: WorkflowRun, node: Node, rv: str, tmpl: str, ok: bool) -> None:
        m = self.metrics
        if tmpl == "volume-create-rv" and ok:
            self.volume(run).created = True
            if m is not None:
                m.megatest_volume_created(rv)
        elif tmpl == "volume-delete-rv":
            rec = self.volume(run)
            if ok:
                rec.deleted = True
                if m is not None:
                    m.megatest_volume_gone(rv)
            else:
                rec.message = node.message  # the exit handler deletes it again; judged in finish()
        elif tmpl in INCIDENTS and ok:
            if tmpl == "chaos-vm-reboot" and node.outputs.get("skipped"):
                self.skipped_reboots += 1
                kind = "vm-reboot-skipped"
            else:
                kind = INCIDENTS[tmpl]
            self.incidents[kind] += 1
            if m is not None:
                m.megatest_incident(kind)

    # --- the report ----------------------------------------------------------------------------
    def finish(self, runs: list[WorkflowRun]) -> None:
        """Final phases of the workflows (volumes that never reached their checker included)."""
        for r in runs:
            if r.name == self.main:
                continue
            rec = self.volume(r)
            if rec.phase == "Running":
                rec.phase, rec.message = r.phase.value, r.message
            if r.phase.value == "Failed" and (r.message or "").startswith("parent workflow"):
                # stopped with the megatest (its --duration ended, or it was aborted): not a failure
                # of the volume itself; its teardown still ran (see deleted / cleanupFailures)
                rec.phase, rec.message = "Stopped", r.message
            if rec.created and not rec.deleted:
                self.cleanup_failures.append(f"rv {rec.rv}: not deleted ({rec.message or r.message})")

    def to_dict(self, main: WorkflowRun | None = None) -> dict[str, Any]:
        vols = sorted(self.volumes.values(), key=lambda v: v.rv)
        broken = [v.rv for v in vols if v.broken]
        return {
            "workflow": self.main,
            "phase": main.phase.value if main is not None else None,
            "message": main.message if main is not None else "",
            "volumes": {
                v.rv: {
                    "storageClass": v.storage_class,
                    "created": v.created,
                    "deleted": v.deleted,
                    "checked": v.checked,
                    "transitions": v.transitions,
                    "ready": v.ready,
                    "rvrConditionFlips": dict(sorted(v.rvr_flips.items())),
                    "verdict": ("broken: " + ", ".join(v.broken)) if v.broken else "held",
                    "phase": v.phase,
                }
                for v in vols
            },
            "rvsCreated": sum(v.created for v in vols),
            "rvsDeleted": sum(v.deleted for v in vols),
            "brokenRVs": broken,
            "incidents": dict(sorted(self.incidents.items())),
            "actions": {k: self.actions[k].to_dict() for k in sorted(self.actions)},
            "cleanupFailures": list(self.cleanup_failures),
        }

    def failed(self, main: WorkflowRun | None = None) -> bool:
        d = self.to_dict(main)
        return bool(
            d["brokenRVs"] or d["cleanupFailures"] or (main is not None and main.phase.value != "Succeed")
        )


def render_report(doc: dict[str, Any], fmt: str, out: TextIO) -> None:
    if fmt == "json":
        print(json.dumps(doc, indent=2, sort_keys=True), file=out)
        return
    w = out.write
    w(f"megatest {doc['workflow']}: {doc['phase']}{' — ' + doc['message'] if doc['message'] else ''}\n")
    w(f"RVs created {doc['rvsCreated']}, deleted {doc['rvsDeleted']}, broken {len(doc['brokenRVs'])}\n\n")
    w(f"{'RV':<14} {'SC':<8} {'IOReady':>7} {'Quorum':>6} {'rvr-flips':>9}  verdict\n")
    for rv, v in doc["volumes"].items():
        t = v["transitions"]
        flips = sum(v.get("rvrConditionFlips", {}).values())
        w(
            f"{rv:<14} {v['storageClass']:<8} {t['IOReady']:>7} {t['Quorum']:>6} {flips:>9}  {v['verdict']}"
            f"{'' if v.get('ready', True) else ' (never ready)'}{'' if v['deleted'] else ' (not deleted)'}\n"
        )
    w("\nincidents:\n")
    for k, n in doc["incidents"].items():
        w(f"  {k:<28} {n}\n")
    w("\nactions:                       count errors  mean\n")
    for k, a in doc["actions"].items():
        w(f"  {k:<28} {a['count']:>5} {a['errors']:>6} {a['meanSeconds']:>7.1f}s\n")
    if doc["cleanupFailures"]:
        w("\ncleanup failures:\n")
        for c in doc["cleanupFailures"]:
            w(f"  {c}\n")
