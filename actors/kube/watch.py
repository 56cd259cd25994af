"""Informer-style watches: list, then watch from the list's resourceVersion, forever.

One :class:`KubeWatch` thread serves one (cluster, apiVersion, kind, namespace); every
``Playground.watch()`` call on that key subscribes a callback to it. The thread

- lists (paginated) and remembers the objects it has seen, then watches from the list's
  resourceVersion with ``allowWatchBookmarks=true`` and ``timeoutSeconds`` (the server ends the
  watch after that long; the thread resumes from the last resourceVersion it saw, events and
  bookmarks alike);
- after a dropped connection (apiserver restart, network trouble, 429) resumes from the last
  resourceVersion after a backoff;
- on 410 Gone (the resourceVersion was compacted away) or other HTTP errors lists again and
  delivers synthetic events for what changed while it was not watching: DELETED for objects
  that vanished, ADDED for new ones, MODIFIED for changed ones (DELETED + ADDED when an object
  was re-created under the same name), so a subscriber never misses a change;
- backs off exponentially (with jitter from the playground's rng) on repeated errors.

Callbacks run **on the watch thread**, one event at a time, in order. They must be thread-safe
with respect to the rest of the program (the engine's trigger queue is) and quick; an exception in
a callback is logged and does not stop the watch.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes.dynamic.resource import Resource

from actors.base import WatchCallback
from actors.kube.client import KubeCluster, decode, request_verb
from actors.kube.errors import Failure, KubeError, classify

log = logging.getLogger("chaosflow.kube")

ObjKey = tuple[str, str]  # namespace ("" when cluster-scoped), name
WatchKey = tuple[str, str, str, str | None]  # cluster, apiVersion, kind, namespace
LIST_PAGE_SIZE = 500


def object_key(obj: dict[str, Any]) -> ObjKey:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _meta(obj: dict[str, Any], field: str) -> str:
    return str((obj.get("metadata") or {}).get(field) or "")


def diff_snapshots(
    old: dict[ObjKey, dict[str, Any]], new: dict[ObjKey, dict[str, Any]]
) -> list[tuple[str, dict[str, Any]]]:
    """Events that turn the state ``old`` into ``new``: DELETED (with the last known object) for
    vanished objects, DELETED + ADDED for re-created ones (other uid), MODIFIED for changed
    resourceVersions, ADDED for new objects. Deterministic order: by key, deletions first."""
    events: list[tuple[str, dict[str, Any]]] = []
    later: list[tuple[str, dict[str, Any]]] = []
    for key in sorted(old):
        before, after = old[key], new.get(key)
        if after is None:
            events.append(("DELETED", before))
        elif _meta(before, "uid") and _meta(after, "uid") and _meta(before, "uid") != _meta(after, "uid"):
            events.append(("DELETED", before))
            later.append(("ADDED", after))
        elif _meta(before, "resourceVersion") != _meta(after, "resourceVersion"):
            later.append(("MODIFIED", after))
    later.extend(("ADDED", new[key]) for key in sorted(new) if key not in old)
    later.sort(key=lambda e: object_key(e[1]))
    return events + later


class _Gone(Exception):
    """The watch's resourceVersion is too old (410 Gone / Expired): list again."""


class WatchSubscription:
    """What ``Playground.watch()`` returns: ``stop()`` unsubscribes the callback; the watch
    thread ends with its last subscriber (promptly: its connection is shut down)."""

    def __init__(
        self, watch: KubeWatch, callback: WatchCallback, on_stop: Callable[[WatchSubscription], None]
    ) -> None:
        self.watch = watch
        self.callback = callback
        self._on_stop = on_stop
        self._stopped = False

    @property
    def active(self) -> bool:
        return not self._stopped

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            self._on_stop(self)


class KubeWatch:
    """The list-then-watch loop of one key, in a daemon thread. See the module docstring."""

    def __init__(
        self,
        cluster: KubeCluster,
        resource: Resource,
        api_version: str,
        kind: str,
        namespace: str | None,
    ) -> None:
        self.cluster = cluster
        self.resource = resource
        self.api_version = api_version
        self.kind = kind
        self.namespace = namespace
        self.key: WatchKey = (cluster.name, api_version, kind, namespace)
        self._stopped = threading.Event()
        self._lock = threading.Lock()  # guards _resp and _subscribers
        self._resp: Any = None
        self._subscribers: list[WatchSubscription] = []
        self._known: dict[ObjKey, dict[str, Any]] = {}
        self._thread: threading.Thread | None = None
        self._progressed = False  # the current watch request got at least one event
        self.resource_version: str | None = None  # None: must list before watching
        # Statistics, for tests and metrics.
        self.lists = 0  # successful lists, the initial one included
        self.relists = 0  # lists after the initial one (410 Gone, errors)
        self.connects = 0  # watch requests that were answered 200
        self.errors = 0  # failed lists and watches
        self.events = 0  # events delivered (synthetic ones included)

    # ------------------------------------------------------------------------------ lifecycle

    @property
    def where(self) -> str:
        scope = f" in namespace {self.namespace}" if self.namespace else ""
        return f'{self.kind} ({self.api_version}){scope} on cluster "{self.cluster.name}"'

    @property
    def _log_fields(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster.name,
            "apiVersion": self.api_version,
            "kind": self.kind,
            "namespace": self.namespace or "",
        }

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def known(self) -> int:
        """How many objects the watch currently knows of."""
        return len(self._known)

    def start(self) -> None:
        """Lists synchronously, so that every change after ``start()`` returns is delivered, then
        starts the thread. A transient failure of that list does not fail the start: the thread
        keeps trying and, having no baseline, delivers ADDED for every object it then finds."""
        try:
            self._list(deliver=False)
        except KubeError as e:
            if not e.transient:
                raise
            log.warning(
                "watch %s: initial list failed, will retry: %s", self.where, e, extra=self._log_fields
            )
        safe = "-".join(str(p) for p in self.key if p)
        self._thread = threading.Thread(target=self._run, name=f"kube-watch-{safe}", daemon=True)
        self._thread.start()

    def subscribe(
        self, callback: WatchCallback, on_stop: Callable[[WatchSubscription], None]
    ) -> WatchSubscription:
        sub = WatchSubscription(self, callback, on_stop)
        with self._lock:
            self._subscribers.append(sub)
        return sub

    def unsubscribe(self, sub: WatchSubscription) -> int:
        """Removes a subscriber; returns how many remain."""
        with self._lock:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(sub)
            return len(self._subscribers)

    def stop(self, timeout: float = 5.0) -> None:
        """Ends the thread: no callback is called after this returns (unless called from one)."""
        self._stopped.set()
        with self._lock:
            self._subscribers.clear()
            self._shutdown_connection()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                log.warning(
                    "watch %s: thread still busy %.0fs after stop",
                    self.where,
                    timeout,
                    extra=self._log_fields,
                )

    def _shutdown_connection(self) -> None:
        """Unblocks a read in progress on the watch connection (caller holds ``_lock``)."""
        resp = self._resp
        if resp is None:
            return
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    # ------------------------------------------------------------------------------ the loop

    def _run(self) -> None:
        failures = 0  # consecutive failures, for the backoff
        gone = 0  # consecutive 410s without a single event in between
        while not self._stopped.is_set():
            if not self.resource_version:
                try:
                    self._list(deliver=True)
                except Exception as e:
                    if self._stopped.is_set():
                        break
                    if not isinstance(e, KubeError):
                        log.exception(
                            "watch %s: unexpected error while listing", self.where, extra=self._log_fields
                        )
                    failures += 1
                    self.errors += 1
                    self._backoff(failures, f"list failed: {e}")
                    continue
            started = time.monotonic()
            try:
                progressed = self._watch_once()
            except _Gone as e:
                gone = self._expired(gone, str(e))
                continue
            except Exception as exc:
                if self._stopped.is_set():
                    break
                failure = classify(exc)
                if failure is None:
                    log.exception("watch %s: unexpected error", self.where, extra=self._log_fields)
                    failure = Failure(None, type(exc).__name__, str(exc), transient=False)
                if failure.code == 410 or failure.reason in ("Expired", "Gone"):
                    gone = self._expired(gone, failure.message or failure.reason)
                    continue
                failures += 1
                self.errors += 1
                # Dropped connections and throttling resume from where they were; other HTTP
                # errors (e.g. "too large resource version") list again, as client-go does.
                if failure.code is not None and failure.code != 429:
                    self.resource_version = None
                self._backoff(
                    failures, f"watch failed: {failure.code_label} {failure.reason}: {failure.message}"
                )
                continue
            if progressed or time.monotonic() - started >= 1.0:
                failures = gone = 0
            else:  # the server closed an empty watch at once: do not spin
                failures += 1
                self._backoff(failures, "watch closed immediately")
        log.debug("watch %s: stopped", self.where, extra=self._log_fields)

    def _expired(self, gone: int, why: str) -> int:
        """The resourceVersion is gone: list again (at once, unless it keeps happening right
        after a list). Returns the new count of consecutive expiries."""
        gone = 1 if self._progressed else gone + 1
        log.info(
            "watch %s: resourceVersion %s expired (%s), listing again",
            self.where,
            self.resource_version,
            why,
            extra={**self._log_fields, "resourceVersion": self.resource_version},
        )
        self.resource_version = None
        if gone > 1:
            self._backoff(gone - 1, "resourceVersion expired again right after a list")
        return gone

    def _backoff(self, failures: int, why: str) -> None:
        if self._stopped.is_set():
            return
        delay = self.cluster.config.watch_retry.delay(failures, self.cluster.rng)
        level = logging.WARNING if failures in (1, 5) or failures % 20 == 0 else logging.INFO
        log.log(
            level,
            "watch %s: %s; retry %d in %.2fs",
            self.where,
            why,
            failures,
            delay,
            extra={**self._log_fields, "attempt": failures, "delay": round(delay, 3)},
        )
        self._stopped.wait(delay)

    # ------------------------------------------------------------------------------ list

    def _list(self, deliver: bool) -> None:
        items, rv = self._list_all()
        snapshot = {object_key(o): o for o in items}
        events = diff_snapshots(self._known, snapshot) if deliver else []
        self._known = snapshot
        self.resource_version = rv
        self.lists += 1
        if deliver:
            self.relists += 1
            log.info(
                "watch %s: listed %d objects at resourceVersion %s, %d changes since the last state",
                self.where,
                len(items),
                rv,
                len(events),
                extra={**self._log_fields, "resourceVersion": rv, "changes": len(events)},
            )
        for event_type, obj in events:
            self._emit(event_type, obj)

    def _list_all(self) -> tuple[list[dict[str, Any]], str]:
        cluster = self.cluster
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            page_token = token

            def page(page_token: str | None = page_token) -> Any:
                return decode(
                    cluster.dynamic.get(
                        self.resource,
                        namespace=self.namespace,
                        limit=LIST_PAGE_SIZE,
                        _continue=page_token,
                        serialize=False,
                        _request_timeout=cluster.timeout,
                    )
                )

            doc = cluster.call("list", self.where, page) or {}
            for item in doc.get("items") or []:
                item.setdefault("apiVersion", self.api_version)
                item.setdefault("kind", self.kind)
                items.append(item)
            meta = doc.get("metadata") or {}
            if not rv:
                rv = str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or None
            if not token:
                return items, rv

    # ------------------------------------------------------------------------------ watch

    def _watch_once(self) -> bool:
        """One watch request, read to its end. True if anything (even a bookmark) arrived."""
        cluster = self.cluster
        timeout = max(1, int(cluster.config.watch_timeout_seconds))
        self._progressed = False
        with request_verb("watch"):
            resp = cluster.dynamic.get(
                self.resource,
                namespace=self.namespace,
                watch=True,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout,
                serialize=False,
                # The read timeout catches a silently dead connection; the server ends the
                # watch itself after timeoutSeconds.
                _request_timeout=(cluster.config.connect_timeout, timeout + 30),
            )
        with self._lock:
            self._resp = resp
        self.connects += 1
        try:
            if self._stopped.is_set():  # stop() came before _resp was set: it could not unblock us
                return False
            for line in _lines(resp):
                if self._stopped.is_set():
                    break
                if not line.strip():
                    continue
                self._handle(json.loads(line))
                self._progressed = True
        finally:
            with self._lock:
                self._resp = None
            with contextlib.suppress(Exception):
                resp.close()
            with contextlib.suppress(Exception):
                resp.release_conn()
        return self._progressed

    def _handle(self, event: dict[str, Any]) -> None:
        event_type = str(event.get("type") or "")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            code = int(obj.get("code") or 0)
            reason = str(obj.get("reason") or "")
            message = str(obj.get("message") or "")
            if code == 410 or reason in ("Expired", "Gone"):
                raise _Gone(message or reason or "410 Gone")
            raise KubeError(
                f"watch {self.where}: {code} {reason}: {message}",
                Failure(code or None, reason, message, transient=True, status=obj),
            )
        rv = _meta(obj, "resourceVersion")
        if event_type == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            log.debug("watch %s: ignoring event type %r", self.where, event_type, extra=self._log_fields)
            return
        obj.setdefault("apiVersion", self.api_version)
        obj.setdefault("kind", self.kind)
        key = object_key(obj)
        if event_type == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = obj
        if rv:
            self.resource_version = rv
        self._emit(event_type, obj)

    def _emit(self, event_type: str, obj: dict[str, Any]) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            if self._stopped.is_set() or not sub.active:
                continue
            self.events += 1
            try:
                sub.callback(event_type, copy.deepcopy(obj))
            except Exception:
                log.exception(
                    "watch %s: callback failed on %s %s",
                    self.where,
                    event_type,
                    object_key(obj),
                    extra=self._log_fields,
                )


def _lines(resp: Any) -> Iterator[str]:
    """The lines of a streamed response body, as they arrive."""
    buffer = bytearray()
    for chunk in resp.stream(amt=None, decode_content=False):
        buffer.extend(chunk if isinstance(chunk, bytes) else str(chunk).encode())
        while (nl := buffer.find(b"\n")) != -1:
            line = bytes(buffer[:nl]).decode("utf-8", errors="replace")
            del buffer[: nl + 1]
            yield line
    if buffer.strip():
        yield bytes(buffer).decode("utf-8", errors="replace")
