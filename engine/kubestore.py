"""Workflow status in the API server (controller mode): the Kubernetes store.

``save(dirty_runs)`` is called by the manager once per engine tick; each run becomes at most one
``PUT .../workflows/NAME/status`` (the status subresource), carrying ``metadata.resourceVersion``
and ``metadata.uid`` as preconditions. Status holds what users read (phase, progress, message,
``nodes[]``) and, under ``status.engine``, what the engine needs to resume after a restart: the
node counter, seed, the random source's state, the workflow deadline and a write ``revision``.
Node state (absolute due times, object references) is in each node's ``state``.

Conflicts (409): the object changed since we last saw it (a label, an annotation, a finalizer).
The store re-reads it and writes again with the latest resourceVersion — our in-memory state is
the newest one, since only the leader writes status. If the stored ``status.engine.revision`` is
*ahead* of ours, another engine wrote it (a newer leader): we never overwrite it. A write that
fails for other reasons (API server down) stays pending and is retried on the next save.
"""

from __future__ import annotations

import base64
import copy
import logging
import struct
import threading
from typing import Any

from actors.kube.errors import KubeError
from actors.kube.playground import KubePlayground
from engine.clock import parse_rfc3339, rfc3339
from engine.model import API_VERSION, Workflow
from engine.phases import WorkflowPhase
from engine.runtime import Node, WorkflowRun, control_fields, restore_control_fields

log = logging.getLogger("chaosflow.kubestore")

KIND = "Workflow"
MAX_CONFLICT_RETRIES = 5
#: metadata fields kept on the in-memory Workflow (the rest is the API server's business)
META_KEEP = ("name", "namespace", "uid", "labels", "annotations", "generation")


# --- the random source, compactly -----------------------------------------------------------------
def pack_rng(state: tuple[Any, ...]) -> dict[str, Any]:
    version, internal, gauss = state
    raw = struct.pack(f"<{len(internal)}I", *internal)
    return {"v": version, "s": base64.b64encode(raw).decode("ascii"), "g": gauss}


def unpack_rng(d: dict[str, Any]) -> tuple[Any, ...]:
    raw = base64.b64decode(d["s"])
    internal = struct.unpack(f"<{len(raw) // 4}I", raw)
    return (d["v"], tuple(internal), d["g"])


# --- run <-> object --------------------------------------------------------------------------------
def status_of(run: WorkflowRun, revision: int) -> dict[str, Any]:
    """The Workflow's ``status``: what users read plus ``engine`` (what a restart needs)."""
    st: dict[str, Any] = {
        "phase": run.phase.value,
        "progress": run.progress(),
        "message": run.message,
        "startTime": rfc3339(run.start_time),
        "finishTime": rfc3339(run.finish_time),
        "entryNode": run.entry_node,
        "nodes": [_compact(n.to_status()) for n in run.nodes.values()],
        "engine": {
            "revision": revision,
            "nodeCounter": run.node_counter,
            "seed": run.seed,
            "rng": pack_rng(run.rng.getstate()),
            "startTime": run.start_time,
            "finishTime": run.finish_time,
            "deadlineAt": run.deadline_at,
            "abortRequested": run.abort_requested,
            **control_fields(run),  # exit handler node, terminate, suspension (engine/runtime.py)
        },
    }
    if run.exit_node is not None:
        st["exitNode"] = run.exit_node
    if run.suspended or run.suspended_nodes:  # as `chaosflow run -o yaml` shows it (engine/runtime.py)
        st["suspended"] = True if run.suspended else sorted(run.suspended_nodes)
    return st


def _compact(d: dict[str, Any]) -> dict[str, Any]:
    """A node's status without empty fields (null parent, "" message, [] children): ~15% smaller."""
    return {k: v for k, v in d.items() if v is not None and v not in ("", [])}


def workflow_doc(obj: dict[str, Any]) -> dict[str, Any]:
    """The Workflow document of an API object (status and server-side metadata left out)."""
    meta = obj.get("metadata") or {}
    return {
        "apiVersion": obj.get("apiVersion", API_VERSION),
        "kind": KIND,
        "metadata": {k: meta[k] for k in META_KEEP if k in meta},
        "spec": obj.get("spec") or {},
    }


def workflow_of(obj: dict[str, Any]) -> Workflow:
    return Workflow.model_validate(workflow_doc(obj))


def revision_of(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("engine") or {}).get("revision") or 0)


def run_of(obj: dict[str, Any], wf: Workflow | None = None) -> WorkflowRun:
    """A run for a Workflow object: fresh, or restored from ``status`` when the engine wrote one."""
    wf = wf if wf is not None else workflow_of(obj)
    status = obj.get("status") or {}
    eng = status.get("engine")
    if not isinstance(eng, dict):
        return WorkflowRun(wf)
    run = WorkflowRun(wf, seed=int(eng.get("seed") or 0))
    run.phase = WorkflowPhase(status.get("phase") or "Init")
    run.start_time = eng.get("startTime")
    run.finish_time = eng.get("finishTime")
    run.deadline_at = eng.get("deadlineAt")
    run.entry_node = status.get("entryNode")
    run.message = status.get("message") or ""
    run.node_counter = int(eng.get("nodeCounter") or 0)
    run.abort_requested = bool(eng.get("abortRequested"))
    restore_control_fields(run, eng)
    if eng.get("rng"):
        run.rng.setstate(unpack_rng(eng["rng"]))
    for d in status.get("nodes") or []:
        times = {
            "start": parse_rfc3339(d["startTime"]) if d.get("startTime") else None,
            "finish": parse_rfc3339(d["finishTime"]) if d.get("finishTime") else None,
        }
        node = Node.from_status(d, times)
        run.nodes[node.name] = node
        if node.phase.finished:
            run.latest[node.template] = node
    return run


class KubeStore:
    """Writes runs' status to Workflow objects through the status subresource (see module doc)."""

    def __init__(self, playground: KubePlayground, cluster: str = "default") -> None:
        self.pg = playground
        self.cluster = cluster
        self._lock = threading.Lock()
        # key -> (uid, resourceVersion) last seen (watch events and our own writes)
        self._meta: dict[str, tuple[str, str]] = {}
        self._revision: dict[str, int] = {}
        self._written: dict[str, dict[str, Any]] = {}  # last status written (skip no-op writes)
        self._pending: dict[str, WorkflowRun] = {}
        self._fenced: set[str] = set()
        self.fenced_all = False  # set when this engine lost leadership: never write again
        self.writes = 0
        self.conflicts = 0
        self.failures = 0
        self.last_size = 0

    # --- bookkeeping fed by the controller ----------------------------------------------------
    def seen(self, obj: dict[str, Any]) -> None:
        """Record an object version (from a watch event or a read)."""
        m = obj.get("metadata") or {}
        key = f"{m.get('namespace')}/{m.get('name')}"
        with self._lock:
            old = self._meta.get(key)
            if (
                old is not None
                and old[0] == m.get("uid")
                and _rv_older(str(m.get("resourceVersion")), old[1])
            ):
                return
            self._meta[key] = (str(m.get("uid")), str(m.get("resourceVersion")))
            self._revision.setdefault(key, revision_of(obj))

    def adopted(self, run: WorkflowRun, obj: dict[str, Any]) -> None:
        self.seen(obj)
        with self._lock:
            self._revision[run.key] = revision_of(obj)

    def forget(self, key: str) -> None:
        with self._lock:
            self._meta.pop(key, None)
            self._revision.pop(key, None)
            self._written.pop(key, None)
            self._pending.pop(key, None)
            self._fenced.discard(key)

    def pending(self) -> int:
        return len(self._pending)

    # --- Store protocol -------------------------------------------------------------------------
    def save(self, runs: list[WorkflowRun]) -> None:
        for r in runs:
            self._pending[r.key] = r
        for key, run in list(self._pending.items()):
            try:
                self._write(run)
                self._pending.pop(key, None)
            except KubeError as e:
                self.failures += 1
                log.warning("status of %s not written (will retry): %s", key, e)
                if not e.transient and e.code not in (409, None):
                    self._pending.pop(key, None)

    def flush(self) -> None:
        self.save([])

    def _write(self, run: WorkflowRun) -> None:
        key = run.key
        if key in self._fenced or self.fenced_all:
            return
        with self._lock:
            meta = self._meta.get(key)
            rev = self._revision.get(key, 0) + 1
        if meta is None:
            return  # never seen (deleted before we got to write): nothing to update
        status = status_of(run, rev)
        comparable = {k: v for k, v in status.items() if k != "engine"}
        comparable["engine"] = {k: v for k, v in status["engine"].items() if k != "revision"}
        if self._written.get(key) == comparable:
            return
        uid, rv = meta
        c = self.pg.cluster(self.cluster)
        res = c.resource(API_VERSION, KIND)
        for _ in range(MAX_CONFLICT_RETRIES):
            body = {
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": run.name, "namespace": run.namespace, "uid": uid, "resourceVersion": rv},
                "status": status,
            }
            try:
                resp = c.call(
                    "update",
                    f"{KIND} {key}/status",
                    lambda body=body: c.dynamic.replace(  # type: ignore[misc]
                        res.status,
                        body=body,
                        namespace=run.namespace,
                        serialize=False,
                        _request_timeout=c.timeout,
                    ),
                )
            except KubeError as e:
                if e.code == 404:
                    log.info("workflow %s is gone; status not written", key)
                    self.forget(key)
                    return
                if e.code != 409:
                    raise
                self.conflicts += 1
                latest = self.pg.get(self.cluster, API_VERSION, KIND, run.namespace, run.name)
                if latest is None or (latest.get("metadata") or {}).get("uid") != uid:
                    log.info("workflow %s was deleted or replaced; status not written", key)
                    self.forget(key)
                    return
                if revision_of(latest) >= rev:
                    log.warning(
                        "status of %s has revision %d >= ours (%d): another engine writes it; stopping",
                        key,
                        revision_of(latest),
                        rev,
                    )
                    self._fenced.add(key)
                    return
                rv = str(latest["metadata"]["resourceVersion"])
                continue
            doc = resp if isinstance(resp, dict) else _decode(resp)
            m = doc.get("metadata") or {}
            with self._lock:
                self._meta[key] = (uid, str(m.get("resourceVersion")))
                self._revision[key] = rev
            self._written[key] = comparable
            self.writes += 1
            self.last_size = len(getattr(resp, "data", b"") or b"")
            return
        raise KubeError(f"status of {key}: {MAX_CONFLICT_RETRIES} conflicts in a row", transient=True)


def _decode(resp: Any) -> dict[str, Any]:
    from actors.kube.client import decode

    doc = decode(resp)
    return copy.deepcopy(doc) if isinstance(doc, dict) else {}


def _rv_older(a: str, b: str) -> bool:
    """Whether resourceVersion ``a`` is older than ``b`` (etcd revisions; opaque otherwise)."""
    try:
        return int(a) < int(b)
    except ValueError:
        return False
