"""The Playground over simulated clusters, and the SimWorld a local run plays in.

``SimPlayground`` maps the Playground protocol onto :class:`actors.sim.apiserver.SimAPIServer`
with the idempotency rules actors rely on (AlreadyExists on create returns the existing object,
NotFound on delete counts as gone). ``SimWorld`` owns the named simulated clusters of a run
(``default`` always), their controllers, and their snapshot for crash/resume.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from actors.base import ActorError, WatchCallback, WatchHandle
from actors.sim.errors import AlreadyExistsError, APIError, NotFoundError
from engine.clock import Clock, TimerService

DEFAULT_WORLD = Path(__file__).parent / "worlds" / "default.yaml"


class SimPlayground:
    def __init__(self, apis: dict[str, Any]) -> None:
        self._apis = apis  # cluster name -> SimAPIServer

    def api(self, cluster: str) -> Any:
        try:
            return self._apis[cluster]
        except KeyError:
            raise ActorError(
                f'unknown cluster "{cluster}" (known: {", ".join(sorted(self._apis))})'
            ) from None

    def clusters(self) -> list[str]:
        return sorted(self._apis)

    def namespaced(self, cluster: str, api_version: str, kind: str) -> bool:
        try:
            return bool(self.api(cluster).resolve(kind, api_version).namespaced)
        except APIError:
            return True

    def create(self, cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
        api = self.api(cluster)
        try:
            return dict(api.create(obj))
        except AlreadyExistsError:
            meta = obj.get("metadata") or {}
            return dict(
                api.get(obj["kind"], meta["name"], meta.get("namespace"), api_version=obj.get("apiVersion"))
            )
        except APIError as e:
            raise ActorError(
                f"create {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}: {e}"
            ) from None

    def get(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str
    ) -> dict[str, Any] | None:
        try:
            return dict(self.api(cluster).get(kind, name, namespace, api_version=api_version))
        except NotFoundError:
            return None
        except APIError as e:
            raise ActorError(f"get {kind} {name}: {e}") from None

    def list(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        try:
            res = self.api(cluster).list(kind, namespace, label_selector, api_version=api_version)
        except APIError as e:
            raise ActorError(f"list {kind}: {e}") from None
        return list(res["items"])

    def patch(
        self,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Any,
        patch_type: str = "merge",
    ) -> dict[str, Any]:
        try:
            return dict(
                self.api(cluster).patch(
                    kind, name, patch, namespace, patch_type=patch_type, api_version=api_version
                )
            )
        except APIError as e:
            raise ActorError(f"patch {kind} {name}: {e}") from None

    def delete(self, cluster: str, api_version: str, kind: str, namespace: str | None, name: str) -> bool:
        api = self.api(cluster)
        try:
            api.delete(kind, name, namespace, api_version=api_version)
        except NotFoundError:
            return True
        except APIError as e:
            raise ActorError(f"delete {kind} {name}: {e}") from None
        try:
            api.get(kind, name, namespace, api_version=api_version)
        except NotFoundError:
            return True
        return False

    def http(
        self, method: str, url: str, headers: dict[str, str], body: str | None, timeout: float
    ) -> dict[str, Any] | None:
        """Answer an HTTP probe to ``http://<svc>.<ns>.svc...`` from a Service (actors/probe.py);
        None for other URLs (they go to the network)."""
        from actors.probe import serve_from_services

        return serve_from_services(self, method, url, headers, body, timeout)

    def logs(self, cluster: str, namespace: str, pod: str) -> str:
        try:
            return str(self.api(cluster).logs(namespace, pod))
        except APIError as e:
            raise ActorError(f"logs of pod {namespace}/{pod}: {e}") from None

    def watch(
        self, cluster: str, api_version: str, kind: str, namespace: str | None, callback: WatchCallback
    ) -> WatchHandle:
        api = self.api(cluster)
        try:
            w: WatchHandle = api.watch(
                kind,
                namespace,
                resource_version=api.resource_version(),
                callback=callback,
                api_version=api_version,
            )
        except APIError as e:
            raise ActorError(f"watch {kind}: {e}") from None
        return w


class SimWorld:
    """The simulated clusters of one run. ``default`` always exists; more can be added by name."""

    def __init__(
        self, clock: Clock, timers: TimerService, seed: int = 0, clusters: tuple[str, ...] = ("default",)
    ) -> None:
        from actors.sim.cluster import SimCluster

        self.clock = clock
        self.timers = timers
        self.seed = seed
        self.clusters: dict[str, SimCluster] = {}
        for name in clusters:
            self.add_cluster(name)
        self.playground = SimPlayground({n: c.api for n, c in self.clusters.items()})
        self.setup_hooks: list[Callable[[SimWorld], None]] = []

    def add_cluster(self, name: str) -> Any:
        from actors.sim.cluster import SimCluster

        rng = random.Random(f"{self.seed}:{name}")
        cluster = SimCluster(name, self.clock, self.timers, rng)
        self.clusters[name] = cluster
        if hasattr(self, "playground"):
            self.playground._apis[name] = cluster.api
        return cluster

    def load_objects(self, objects: list[dict[str, Any]], cluster: str = "default") -> None:
        """Create objects (a world file) in a cluster; status given in the file is kept."""
        api = self.clusters[cluster].api
        for obj in objects:
            created = api.create(obj)
            if obj.get("status") and api.resolve(obj["kind"], obj.get("apiVersion")).has_status_subresource:
                api.update_status({**created, "status": obj["status"]})

    def load_world_file(self, path: str | None = None, cluster: str = "default") -> None:
        """Load a YAML world file (default: the bundled three-node cluster with demo apps)."""
        from engine.yamlio import load_documents

        if path is None:
            path = str(DEFAULT_WORLD)
        with open(path, "rb") as f:
            docs = load_documents(f.read(), path)
        self.load_objects([d.data for d in docs if isinstance(d.data, dict)], cluster)

    def snapshot(self) -> dict[str, Any]:
        return {name: c.snapshot() for name, c in self.clusters.items()}

    def restore(self, data: dict[str, Any]) -> None:
        # Stop every cluster first and restart them only when all are restored: some controllers
        # read other clusters (the megatest world's "test" reads "parent") and must never see a
        # half-restored world.
        for name in data:
            if name not in self.clusters:
                self.add_cluster(name)
        from actors.sim.cluster import restore_timers

        running = [c for c in self.clusters.values() if any(x.running for x in c.controllers)]
        for c in running:
            c.stop()
        for name, snap in data.items():
            self.clusters[name].restore(snap)
        # the saved timers of all clusters in their one original order, then the controllers
        restore_timers([t for name in data for t in self.clusters[name].restored_timers])
        for c in running:
            c.start()

    def add_megatest_clusters(self, spec: Any = None, **options: Any) -> Any:
        """Add the clusters "test" (nested, sds-replicated-volume) and "parent" (DVP: VMs, VM
        operations, Cilium policies) of the megatest world; returns its
        :class:`actors.sim.rv.MegatestSim` handle (see :func:`actors.sim.rv.build_megatest_world`)."""
        from actors.sim.rv import build_megatest_world

        return build_megatest_world(self, spec, **options)
