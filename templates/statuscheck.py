"""StatusCheck: HTTP or Kubernetes-condition probes, Synchronous or Continuous (Chaos Mesh's fields).

``statusCheck: {mode, type, duration, timeoutSeconds (1), intervalSeconds (10), failureThreshold (3),
successThreshold (1), recordsHistoryLimit (100), http | kubernetes}`` and, at template level,
``abortWithStatusCheck`` (a failed check aborts the whole workflow, with cleanup; inside a child
workflow that is the child, whose waiting parent node then fails).

A probe runs at the start and then every ``intervalSeconds`` (fixed rate; the next probe is due
``interval`` after the previous one was due, or at once if that has passed).

- **Synchronous**: until ``successThreshold`` consecutive successes (Succeed), ``failureThreshold``
  consecutive failures (Failed) or ``duration`` (Failed: not healthy in time).
- **Continuous**: for ``duration`` (then Succeed), or until stopped by its parent (a Parallel whose
  deadline is a lifetime ends it with Succeed); ``failureThreshold`` consecutive failures fail it.
  ``failureThreshold: 0`` (our extension) never fails: the check only records and counts.

Probes:

- **HTTP** (``http: {url, method GET|POST, headers, body, criteria: {statusCode: "200" |
  "200-399"}}``): actor ``probe.http`` with ``timeoutSeconds``; a status within the criteria is a
  success, any other status or a network error is a failure. On the simulated cluster,
  ``http://<service>.<namespace>.svc...`` is answered from the Service (``actors/probe.py``).
- **Kubernetes** (``kubernetes: {cluster, apiVersion, kind, namespace, name, conditionType,
  conditionStatus ("True"), conditions: [{type, status}]}``): the object is *watched*; every change
  updates the per-condition state and counts transitions, and each probe (at the interval) judges
  the latest observed state: healthy = the object exists and every listed condition has its
  expected status (no condition listed: the object exists).

Transitions are counted from the expected (healthy) state, so an even count means "holds at the
end" and an odd count "broken at the end": ``outputs.transitions`` (HTTP: flips of consecutive
probe outcomes; Kubernetes: flips of the watched health, so a flap between two probes is counted)
and, for Kubernetes, ``outputs.conditionTransitions: {type: count}`` per condition. The node's
outputs also hold ``probes``, ``successes``, ``failures``, ``healthy`` and ``history``: the last
``recordsHistoryLimit`` records ``{time, outcome: Success|Failure, message}`` (probe results and,
for Kubernetes, the watched transitions).

Each watched change is also told live, as it is applied, to the manager's
``observation_listeners`` (``Transition.observations``): one ``conditionChanged`` observation per
condition that started or stopped having its expected status (``{object, condition, expected,
observed, reason, message, transitions}``, ``transitions`` being that condition's running count),
or ``healthChanged`` when no condition is listed. The megatest logs and counts them from there.

| event \\ phase      | Init                                                        | Running |
|--------------------|-------------------------------------------------------------|---------|
| NodeCreated        | render the probe; probe now; end timer; watch (Kubernetes) -> Running | - |
| NodeProbe          | -                                                           | HTTP: call probe.http; Kubernetes: judge the latest observed object |
| NodeProbeResult    | -                                                           | record; thresholds -> Succeed / Failed (abortWithStatusCheck: abort the workflow); else next probe |
| NodeObjectChanged  | -                                                           | Kubernetes: count condition transitions |
| NodeHoldingAwake   | -                                                           | duration over: Continuous -> Succeed; Synchronous -> Failed |

The check holds nothing, so abort and deadline end it at once. Timers are absolute times in
``state`` (``nextProbeAt``, ``endAt``); on resume the watch is re-opened (a change missed while
down is counted then), an HTTP probe that was in flight is re-issued, and timers are re-armed.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.clock import rfc3339
from engine.duration import DurationSpec
from engine.phases import AbortWorkflow, Act, Effect, Event, NotifyAt, Observation, Observe, Transition
from engine.render import RENDERED_FIELDS, rendered
from templates.base import IGNORED, E, NodeMachine, P, finish

if TYPE_CHECKING:
    from engine.model import Template, Workflow
    from engine.runtime import Node, WorkflowRun

_STATUS_CODE = re.compile(r"^\s*(\d{3})\s*(?:-\s*(\d{3})\s*)?$")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class HTTPCriteria(_Spec):
    statusCode: str = Field(
        default="200-299", description='Expected status code: "200" or an inclusive range "200-399".'
    )

    @field_validator("statusCode", mode="before")
    @classmethod
    def _code(cls, v: Any) -> str:
        if isinstance(v, int) and not isinstance(v, bool):
            v = str(v)
        if not isinstance(v, str) or status_code_range(v) is None:
            raise ValueError(f'invalid statusCode {v!r}: expected "200" or a range like "200-399"')
        return v


class HTTPProbe(_Spec):
    url: str = Field(description="URL to request; {{ expr }} allowed.")
    method: Literal["GET", "POST"] = "GET"
    headers: dict[str, str | list[str]] = Field(default_factory=dict)
    body: str | None = None
    criteria: HTTPCriteria = Field(default_factory=HTTPCriteria)


class ConditionCheck(_Spec):
    type: str
    status: str = "True"


class KubernetesProbe(_Spec):
    cluster: str = Field(default="default", description="Name of the cluster the object is in.")
    apiVersion: str = "v1"
    kind: str
    namespace: str | None = Field(default=None, description="Default: the workflow's namespace.")
    name: str = Field(description="Object name; {{ expr }} allowed.")
    conditionType: str | None = Field(default=None, description="status.conditions[].type to check.")
    conditionStatus: str = Field(default="True", description="Expected status of conditionType.")
    conditions: list[ConditionCheck] = Field(
        default_factory=list, description="More conditions to check (all must hold); each is counted."
    )


class StatusCheckSpec(_Spec):
    mode: Literal["Synchronous", "Continuous"] = "Synchronous"
    type: Literal["HTTP", "Kubernetes"] = "HTTP"
    duration: DurationSpec | None = Field(
        default=None,
        description="Synchronous: time to become healthy. Continuous: how long to check "
        "(none: until stopped by the parent).",
    )
    timeoutSeconds: int = Field(default=1, ge=1)
    intervalSeconds: int = Field(default=10, ge=1)
    failureThreshold: int = Field(
        default=3, ge=0, description="Consecutive failures that fail the check (0: never fail)."
    )
    successThreshold: int = Field(default=1, ge=1)
    recordsHistoryLimit: int = Field(default=100, ge=1, le=1000)
    http: HTTPProbe | None = None
    kubernetes: KubernetesProbe | None = None


def status_code_range(text: str) -> tuple[int, int] | None:
    m = _STATUS_CODE.match(text)
    if m is None:
        return None
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    return (lo, hi) if lo <= hi else None


def wanted_conditions(k: KubernetesProbe) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if k.conditionType:
        out.append((k.conditionType, k.conditionStatus))
    for c in k.conditions:
        if all(c.type != t for t, _ in out):
            out.append((c.type, c.status))
    return out


def _spec(run: WorkflowRun, node: Node) -> StatusCheckSpec:
    sc = run.template(node).statusCheck
    assert sc is not None  # validated
    return sc


#: fields with {{ expr }} rendered when the node starts (engine.render.start_node)
RENDERED_FIELDS["StatusCheck"] = (
    "statusCheck.http.url",
    "statusCheck.http.headers",
    "statusCheck.http.body",
    "statusCheck.kubernetes.cluster",
    "statusCheck.kubernetes.namespace",
    "statusCheck.kubernetes.name",
)


def _target(run: WorkflowRun, node: Node, sc: StatusCheckSpec) -> dict[str, Any]:
    """What to probe, with the fields rendered when the node started."""
    if sc.type == "HTTP":
        assert sc.http is not None
        h = sc.http
        body = rendered(node, "statusCheck.http.body", h.body)
        return {
            "url": str(rendered(node, "statusCheck.http.url", h.url)),
            "method": h.method,
            "headers": rendered(node, "statusCheck.http.headers", dict(h.headers)),
            "body": None if body is None else str(body),
        }
    assert sc.kubernetes is not None
    k = sc.kubernetes
    namespace = rendered(node, "statusCheck.kubernetes.namespace", k.namespace)
    return {
        "cluster": str(rendered(node, "statusCheck.kubernetes.cluster", k.cluster)),
        "apiVersion": k.apiVersion,
        "kind": k.kind,
        "namespace": str(namespace) if namespace else run.namespace,
        "name": str(rendered(node, "statusCheck.kubernetes.name", k.name)),
        "conditions": [[t, s] for t, s in wanted_conditions(k)],
    }


def _observe(t: dict[str, Any]) -> Observe:
    return Observe(t["cluster"], t["apiVersion"], t["kind"], t["namespace"], t["name"])


def _probe_act(sc: StatusCheckSpec, target: dict[str, Any], seq: int) -> Act:
    params = {**target, "timeout": float(sc.timeoutSeconds), "seq": seq}
    return Act("probe.http", params, ok=E.NODE_PROBE_RESULT, fail=E.NODE_PROBE_RESULT)


def _object_desc(t: dict[str, Any]) -> str:
    ns = f"{t['namespace']}/" if t.get("namespace") else ""
    return f"{t['kind']} {ns}{t['name']}"


# --- handlers ----------------------------------------------------------------------------------------
def on_created(m: StatusCheckMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    sc = _spec(run, node)
    target = _target(run, node, sc)
    end_at = now + run.draw(sc.duration) if sc.duration is not None else None
    state: dict[str, Any] = {
        "target": target,
        "nextProbeAt": now,
        "endAt": end_at,
        "seq": 0,
        "probing": False,
        "okRun": 0,
        "failRun": 0,
        "last": True,  # transitions are counted from the expected (healthy) state
    }
    outputs: dict[str, Any] = {
        "probes": 0,
        "successes": 0,
        "failures": 0,
        "transitions": 0,
        "healthy": None,
        "history": [],
    }
    effects: list[Effect] = []
    if sc.type == "Kubernetes":
        effects.append(_observe(target))
        state |= {"observed": False, "probeDue": False, "watchHealthy": True, "lastObserved": ""}
        state["condOk"] = {t: True for t, _ in target["conditions"]}
        outputs["conditionTransitions"] = {t: 0 for t, _ in target["conditions"]}
    effects.append(NotifyAt(E.NODE_PROBE, now))
    if end_at is not None:
        effects.append(NotifyAt(E.NODE_HOLDING_AWAKE, end_at))
    return Transition(P.RUNNING, effects, state=state, outputs=outputs)


def on_probe(m: StatusCheckMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    if st.get("probing") or now < st["nextProbeAt"]:
        return IGNORED  # one probe at a time; a stale timer (re-armed on resume)
    sc = _spec(run, node)
    next_at = st["nextProbeAt"] + sc.intervalSeconds
    if sc.type == "HTTP":
        seq = int(st.get("seq", 0)) + 1
        return Transition(
            None,
            [_probe_act(sc, st["target"], seq)],
            state={"probing": True, "seq": seq, "nextProbeAt": next_at},
        )
    if not st.get("observed"):
        # the watch has not delivered the object yet: probe as soon as it does
        return Transition(None, [], state={"probeDue": True, "nextProbeAt": next_at})
    ok, msg = _judge_observed(st)
    return _record(node, run, now, st, node.outputs, ok, msg, next_at)


def on_probe_result(m: StatusCheckMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    if not st.get("probing"):
        return IGNORED
    res = ev.payload
    if isinstance(res, dict):
        if res.get("seq") is not None and res.get("seq") != st.get("seq"):
            return IGNORED  # the answer to a probe re-issued after a restart
        ok, msg = _judge_http(_spec(run, node), res)
    else:
        ok, msg = False, f"probe failed: {res}"
    return _record(node, run, now, st, node.outputs, ok, msg, st["nextProbeAt"])


def on_object_changed(
    m: StatusCheckMachine, node: Node, ev: Event, run: WorkflowRun, now: float
) -> Transition:
    st = node.state
    if "condOk" not in st:
        return IGNORED
    obj = ev.payload if isinstance(ev.payload, dict) else None
    target = st["target"]
    conds = _conditions(obj) if obj is not None else {}
    cond_ok = {t: obj is not None and conds.get(t) == want for t, want in target["conditions"]}
    healthy = obj is not None and all(cond_ok.values())
    if obj is None:
        summary = "not found"
    else:
        summary = ", ".join(f"{t}={conds.get(t, 'missing')}" for t, _ in target["conditions"]) or "exists"
    out = node.outputs
    counts = dict(out.get("conditionTransitions") or {})
    changed = False
    prev = st["condOk"]
    for t, _ in target["conditions"]:
        if cond_ok[t] != prev.get(t, True):
            counts[t] = int(counts.get(t, 0)) + 1
            changed = True
    flipped = healthy != st.get("watchHealthy", True)
    if st.get("observed") and not changed and not flipped and st.get("lastObserved") == summary:
        return IGNORED  # nothing we track changed
    state: dict[str, Any] = {
        "observed": True,
        "condOk": cond_ok,
        "watchHealthy": healthy,
        "lastObserved": summary,
    }
    outputs: dict[str, Any] = {"conditionTransitions": counts}
    if flipped:
        outputs["transitions"] = int(out.get("transitions", 0)) + 1
    observations: tuple[Observation, ...] = ()
    if changed or flipped:
        msg = f"watch: {_object_desc(target)}: {summary}"
        outputs["history"] = _append_history(out, _spec(run, node), now, healthy, msg)
        observations = _observations(target, obj, prev, cond_ok, counts, healthy, outputs, out)
    if st.get("probeDue"):
        merged_st = {**st, **state}
        merged_out = {**out, **outputs}
        ok, msg = _judge_observed(merged_st)
        tr = _record(node, run, now, merged_st, merged_out, ok, msg, st["nextProbeAt"])
        tr.state = {**state, **(tr.state or {})}
        tr.outputs = {**outputs, **(tr.outputs or {})}
        tr.observations = observations
        return tr
    return Transition(None, [], state=state, outputs=outputs, observations=observations)


def _observations(
    target: dict[str, Any],
    obj: dict[str, Any] | None,
    prev: dict[str, bool],
    cond_ok: dict[str, bool],
    counts: dict[str, Any],
    healthy: bool,
    outputs: dict[str, Any],
    out: dict[str, Any],
) -> tuple[Observation, ...]:
    """What the watch saw change, for the manager's observation listeners (live logs, metrics):
    one ``conditionChanged`` per condition whose expected status started or stopped holding (with
    its observed status, reason, message and running transition count), or one ``healthChanged``
    when only the object's existence was checked."""
    desc = _object_desc(target)
    overall = int(outputs.get("transitions", out.get("transitions", 0)))
    details = _condition_details(obj) if obj is not None else {}
    obs: list[Observation] = []
    for t, want in target["conditions"]:
        if cond_ok[t] == prev.get(t, True):
            continue
        status, reason, message = details.get(t, ("not found" if obj is None else "missing", "", ""))
        obs.append(
            Observation(
                "conditionChanged",
                {
                    "object": desc,
                    "condition": t,
                    "expected": want,
                    "observed": status,
                    "reason": reason,
                    "message": message,
                    "transitions": int(counts.get(t, 0)),
                    "healthy": healthy,
                    "healthTransitions": overall,
                },
            )
        )
    if not obs:
        obs.append(
            Observation(
                "healthChanged",
                {
                    "object": desc,
                    "condition": None,
                    "expected": "exists",
                    "observed": "exists" if obj is not None else "not found",
                    "reason": "",
                    "message": "",
                    "transitions": overall,
                    "healthy": healthy,
                    "healthTransitions": overall,
                },
            )
        )
    return tuple(obs)


def on_end(m: StatusCheckMachine, node: Node, ev: Event, run: WorkflowRun, now: float) -> Transition:
    st = node.state
    end_at = st.get("endAt")
    if end_at is None or now < end_at:
        return IGNORED
    sc = _spec(run, node)
    out = node.outputs
    took = f"{end_at - node.start_time:g}s" if node.start_time is not None else "its duration"
    if sc.mode == "Continuous":
        return finish(
            True,
            f"checked for {took}: {out.get('probes', 0)} probes, {out.get('failures', 0)} failures, "
            f"{out.get('transitions', 0)} transitions",
        )
    last = (out.get("history") or [{}])[-1].get("message", "no probe finished")
    return _fail(
        node,
        run,
        f"not healthy within {took} ({st.get('okRun', 0)}/{sc.successThreshold} consecutive successes; "
        f"last: {last})",
        "StatusCheckTimeout",
    )


# --- judging and recording -----------------------------------------------------------------------------
def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    conds = (obj.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): str(c.get("status")) for c in conds if isinstance(c, dict)}


def _condition_details(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    """type -> (status, reason, message) of the object's status.conditions."""
    conds = (obj.get("status") or {}).get("conditions") or []
    return {
        str(c.get("type")): (str(c.get("status")), str(c.get("reason") or ""), str(c.get("message") or ""))
        for c in conds
        if isinstance(c, dict)
    }


def _judge_http(sc: StatusCheckSpec, res: dict[str, Any]) -> tuple[bool, str]:
    if res.get("error"):
        return False, str(res["error"])
    code = res.get("statusCode")
    assert sc.http is not None
    want = sc.http.criteria.statusCode
    rng = status_code_range(want) or (200, 299)
    if isinstance(code, int) and rng[0] <= code <= rng[1]:
        return True, f"HTTP {code}"
    return False, f"HTTP {code} (expected {want})"


def _judge_observed(st: dict[str, Any]) -> tuple[bool, str]:
    desc = _object_desc(st["target"])
    return bool(st.get("watchHealthy")), f"{desc}: {st.get('lastObserved') or 'not observed'}"


def _append_history(
    out: dict[str, Any], sc: StatusCheckSpec, now: float, ok: bool, msg: str
) -> list[dict[str, Any]]:
    hist = list(out.get("history") or [])
    hist.append({"time": rfc3339(now), "outcome": "Success" if ok else "Failure", "message": msg})
    return hist[-sc.recordsHistoryLimit :]


def _record(
    node: Node,
    run: WorkflowRun,
    now: float,
    st: dict[str, Any],
    out: dict[str, Any],
    ok: bool,
    msg: str,
    next_at: float,
) -> Transition:
    """Count one probe result and decide: finished, or the next probe."""
    sc = _spec(run, node)
    ok_run = int(st.get("okRun", 0)) + 1 if ok else 0
    fail_run = 0 if ok else int(st.get("failRun", 0)) + 1
    outputs: dict[str, Any] = {
        "probes": int(out.get("probes", 0)) + 1,
        "successes": int(out.get("successes", 0)) + (1 if ok else 0),
        "failures": int(out.get("failures", 0)) + (0 if ok else 1),
        "healthy": ok,
        "history": _append_history(out, sc, now, ok, msg),
    }
    if sc.type == "HTTP" and ok != st.get("last", True):
        outputs["transitions"] = int(out.get("transitions", 0)) + 1
    state: dict[str, Any] = {
        "okRun": ok_run,
        "failRun": fail_run,
        "probing": False,
        "probeDue": False,
        "last": ok,
        "nextProbeAt": next_at,
    }
    if sc.mode == "Synchronous" and ok_run >= sc.successThreshold:
        tr = finish(True, f"healthy: {ok_run} consecutive successes ({msg})")
    elif sc.failureThreshold and fail_run >= sc.failureThreshold:
        tr = _fail(
            node, run, f"{fail_run} consecutive failures (failureThreshold {sc.failureThreshold}): {msg}"
        )
    else:
        tr = Transition(None, [NotifyAt(E.NODE_PROBE, max(next_at, now))])
    tr.state = state
    tr.outputs = outputs
    return tr


def _fail(node: Node, run: WorkflowRun, msg: str, reason: str = "StatusCheckFailed") -> Transition:
    tr = finish(False, msg, reason)
    if run.template(node).abortWithStatusCheck:
        tr.effects.append(AbortWorkflow(run.key, f"status check {node.name} failed: {msg}"))
    return tr


class StatusCheckMachine(NodeMachine):
    kind = "StatusCheck"
    phases = frozenset({P.INIT, P.RUNNING, P.SUCCEED, P.FAILED})
    table = {
        (P.INIT, E.NODE_CREATED): on_created,
        (P.RUNNING, E.NODE_PROBE): on_probe,
        (P.RUNNING, E.NODE_PROBE_RESULT): on_probe_result,
        (P.RUNNING, E.NODE_OBJECT_CHANGED): on_object_changed,
        (P.RUNNING, E.NODE_HOLDING_AWAKE): on_end,
    }

    def resume(self, node: Node, run: WorkflowRun, now: float) -> list[Effect]:
        effects = super().resume(node, run, now)
        if node.phase is not P.RUNNING:
            return effects
        st = node.state
        sc = _spec(run, node)
        if sc.type == "Kubernetes":
            effects.append(_observe(st["target"]))
        if st.get("endAt") is not None:
            effects.append(NotifyAt(E.NODE_HOLDING_AWAKE, st["endAt"]))
        if st.get("probing"):
            effects.append(_probe_act(sc, st["target"], int(st.get("seq", 0))))
        elif not st.get("probeDue"):
            effects.append(NotifyAt(E.NODE_PROBE, st["nextProbeAt"]))
        return effects

    @staticmethod
    def validate(tmpl: Template) -> list[tuple[tuple[str | int, ...], str]]:
        sc = tmpl.statusCheck
        if sc is None:
            return [(("statusCheck",), "StatusCheck template needs a statusCheck spec")]
        issues: list[tuple[tuple[str | int, ...], str]] = []
        probe = "http" if sc.type == "HTTP" else "kubernetes"
        other = "kubernetes" if sc.type == "HTTP" else "http"
        if getattr(sc, probe) is None:
            issues.append((("statusCheck", probe), f"required for type {sc.type}"))
        if getattr(sc, other) is not None:
            issues.append((("statusCheck", other), f"not used by type {sc.type}"))
        # {{ }} syntax in the rendered fields is checked for every kind (engine.validate)
        if sc.http is not None and not sc.http.url:
            issues.append((("statusCheck", "http", "url"), "required"))
        if sc.kubernetes is not None and not sc.kubernetes.name:
            issues.append((("statusCheck", "kubernetes", "name"), "required"))
        if (
            sc.mode == "Synchronous"
            and sc.failureThreshold == 0
            and sc.duration is None
            and tmpl.deadline is None
        ):
            issues.append(
                (
                    ("statusCheck", "failureThreshold"),
                    "a Synchronous check that never fails needs a duration or a deadline "
                    "(it would wait forever for a service that stays down)",
                )
            )
        return issues


def unbounded_check_issues(wf: Workflow) -> list[tuple[tuple[str | int, ...], str]]:
    """Continuous checks that may never end: no duration and no deadline on the check, on every
    template on some path from the entry to it, or on the workflow. (path, message) pairs."""
    from engine.validate import reachable_without_deadline

    templates = wf.template_map()
    index = {t.name: i for i, t in enumerate(wf.spec.templates)}
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for name in reachable_without_deadline(wf):
        sc = templates[name].statusCheck
        if templates[name].templateType != "StatusCheck" or sc is None:
            continue
        if sc.mode == "Continuous" and sc.duration is None:
            issues.append(
                (
                    ("spec", "templates", index[name], "statusCheck", "duration"),
                    f'Continuous StatusCheck "{name}" never ends while the service stays healthy: give it a '
                    "duration, or a deadline (on it, on every template that contains it, or on the "
                    "workflow; onDeadline: Succeed makes the deadline a lifetime)",
                )
            )
    return issues
