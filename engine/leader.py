"""Leader election on a ``coordination.k8s.io/v1`` Lease, the way client-go does it.

The Lease's ``holderIdentity``, ``leaseDurationSeconds``, ``acquireTime``, ``renewTime`` and
``leaseTransitions`` are read and written with optimistic concurrency (resourceVersion). A
candidate takes the Lease when it is free (no holder, or released) or when the record it last
observed has not changed for ``lease_duration`` seconds of *its own* monotonic clock (clock skew
between hosts does not matter). The leader renews every ``retry_period``; if it cannot renew
within ``renew_deadline`` it stops leading (``on_stopped``) — it must stop acting at once.
``release()`` (graceful shutdown) empties the holder so a standby takes over without waiting.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from actors.base import ActorError
from actors.kube.errors import KubeError
from actors.kube.playground import KubePlayground

log = logging.getLogger("chaosflow.leader")

LEASE_API = "coordination.k8s.io/v1"


def micro_time(t: float | None = None) -> str:
    dt = datetime.fromtimestamp(time.time() if t is None else t, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


class LeaderElector:
    def __init__(
        self,
        playground: KubePlayground,
        namespace: str,
        name: str,
        identity: str,
        *,
        cluster: str = "default",
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_started: Callable[[], None] = lambda: None,
        on_stopped: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not (lease_duration > renew_deadline > retry_period > 0):
            raise ValueError("need lease_duration > renew_deadline > retry_period > 0")
        self.pg = playground
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.clock = clock
        self._leading = False
        self._observed: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.transitions_seen = 0
        self.attempted = False  # at least one round trip to the API server happened

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def holder(self) -> str | None:
        spec = (self._observed or {}).get("spec") or {}
        return spec.get("holderIdentity")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaosflow-leader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- the loop -------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            ok = False
            try:
                ok = self._try_acquire_or_renew()
            except (ActorError, OSError) as e:
                log.info("lease %s/%s: %s", self.namespace, self.name, e)
            self.attempted = True
            now = self.clock()
            if ok:
                self._last_renew = now
                if not self._leading:
                    self._leading = True
                    log.info("became leader (%s)", self.identity)
                    self.on_started()
            elif self._leading and now - self._last_renew > self.renew_deadline:
                self._leading = False
                log.error("lost leadership: could not renew lease within %.1fs", self.renew_deadline)
                self.on_stopped()
                return
            self._stop.wait(self.retry_period)

    def _spec(self, transitions: int, acquire: str | None) -> dict[str, Any]:
        now = micro_time()
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire or now,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _try_acquire_or_renew(self) -> bool:
        lease = self.pg.get(self.cluster, LEASE_API, "Lease", self.namespace, self.name)
        if lease is None:
            body = {
                "apiVersion": LEASE_API,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(0, None),
            }
            created = self.pg.create(self.cluster, body)
            self._observe(created)
            return (created.get("spec") or {}).get("holderIdentity") == self.identity
        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder and holder != self.identity:
            duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if self.clock() - self._observed_at < duration:
                return False  # someone else holds a lease that has not expired
        if holder == self.identity:
            new = self._spec(transitions, spec.get("acquireTime"))
        else:
            new = self._spec(transitions + 1, None)
        body = {
            "apiVersion": LEASE_API,
            "kind": "Lease",
            "metadata": {**lease["metadata"]},
            "spec": new,
        }
        try:
            updated = self._replace(body)
        except KubeError as e:
            if e.code == 409:
                return False  # someone else wrote it first
            raise
        self._observe(updated)
        return True

    def _replace(self, body: dict[str, Any]) -> dict[str, Any]:
        from actors.kube.client import decode

        c = self.pg.cluster(self.cluster)
        res = c.resource(LEASE_API, "Lease")
        resp = c.call(
            "update",
            f"Lease {self.namespace}/{self.name}",
            lambda: c.dynamic.replace(
                res, body=body, namespace=self.namespace, serialize=False, _request_timeout=c.timeout
            ),
        )
        doc = decode(resp)
        return doc if isinstance(doc, dict) else {}

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        key = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        old = self._observed or {}
        ospec = old.get("spec") or {}
        if key != (ospec.get("holderIdentity"), ospec.get("renewTime"), ospec.get("leaseTransitions")):
            self._observed_at = self.clock()
        self._observed = lease

    def release(self) -> None:
        """Give the Lease up (graceful shutdown): a standby takes over at once."""
        if not self._leading:
            return
        self._leading = False
        self._stop.set()
        try:
            lease = self.pg.get(self.cluster, LEASE_API, "Lease", self.namespace, self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            spec = dict(lease["spec"])
            spec.update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": micro_time()})
            self._replace(
                {"apiVersion": LEASE_API, "kind": "Lease", "metadata": lease["metadata"], "spec": spec}
            )
            log.info("released lease %s/%s", self.namespace, self.name)
        except ActorError as e:
            log.warning("could not release lease: %s", e)
