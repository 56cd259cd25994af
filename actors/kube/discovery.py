"""API discovery for the DynamicClient: per group-version, cached in memory, refreshed on a miss.

The stock discoverers of ``kubernetes.dynamic`` share a cache file in the temp folder keyed by
the server URL, fetch every API group up front and are not thread-safe. This one fetches only the
group-versions asked for (``/api/v1`` or ``/apis/<group>/<version>``), keeps them per client (so
per cluster), and when a kind is missing from a cached group-version fetches that group-version
again once: kinds of CRDs installed after start are found on first use.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.dynamic.exceptions import ResourceNotFoundError
from kubernetes.dynamic.resource import Resource

log = logging.getLogger("chaosflow.kube")

# fetch(path) -> the decoded JSON document, or None when the server answers 404
Fetch = Callable[[str], "dict[str, Any] | None"]


def discovery_path(api_version: str) -> str:
    if "/" in api_version:
        return f"/apis/{api_version}"
    return f"/api/{api_version}"


class Discovery:
    """Duck-types the ``kubernetes.dynamic`` discoverer interface (``get``, ``search``, ``version``)
    that ``DynamicClient(client, discoverer=...)`` expects. Thread-safe."""

    def __init__(
        self, client: Any, cache_file: str | None = None, *, fetch: Fetch, cluster: str = ""
    ) -> None:
        del cache_file  # in-memory only
        self.client = client
        self.cluster = cluster
        self._fetch = fetch
        self._lock = threading.RLock()
        self._kinds: dict[str, dict[str, Resource]] = {}  # groupVersion -> kind -> Resource
        self._version: dict[str, Any] | None = None
        self.fetches = 0  # group-version documents fetched
        self.refreshes = 0  # of those, re-fetches after a miss

    @property
    def version(self) -> dict[str, Any]:
        with self._lock:
            if self._version is None:
                self._version = {"kubernetes": self._fetch("/version") or {}}
            return self._version

    def invalidate(self, api_version: str | None = None) -> None:
        """Forgets one group-version (or everything)."""
        with self._lock:
            if api_version is None:
                self._kinds.clear()
                self._version = None
            else:
                self._kinds.pop(api_version, None)

    def cached(self, api_version: str, kind: str) -> Resource | None:
        with self._lock:
            return self._kinds.get(api_version, {}).get(kind)

    def get(self, api_version: str | None = None, kind: str | None = None, **kwargs: Any) -> Resource:
        """The resource serving ``kind`` in ``api_version``; raises ResourceNotFoundError."""
        if not api_version or not kind:
            raise ResourceNotFoundError(f"discovery needs api_version and kind, got {api_version!r} {kind!r}")
        with self._lock:
            known = api_version in self._kinds
            hit = self._kinds.get(api_version, {}).get(kind)
            if hit is not None:
                return hit
            # First use of this group-version, or a miss: (re)fetch it, once.
            if known:
                self.refreshes += 1
                log.info(
                    "discovery miss, refreshing %s on cluster %s",
                    api_version,
                    self.cluster,
                    extra={"cluster": self.cluster, "apiVersion": api_version, "kind": kind},
                )
            self._kinds[api_version] = self._load(api_version)
            hit = self._kinds[api_version].get(kind)
            if hit is None:
                if not self._kinds[api_version]:
                    del self._kinds[api_version]  # group-version not served: ask again next time
                raise ResourceNotFoundError(f"no kind {kind!r} in {api_version!r}")
            return hit

    def search(self, **kwargs: Any) -> list[Resource]:
        try:
            return [self.get(**kwargs)]
        except ResourceNotFoundError:
            return []

    def _load(self, api_version: str) -> dict[str, Resource]:
        self.fetches += 1
        doc = self._fetch(discovery_path(api_version)) or {}
        group, _, version = api_version.rpartition("/")
        prefix = "apis" if group else "api"
        entries = [r for r in doc.get("resources") or [] if isinstance(r, dict) and r.get("name")]
        subresources: dict[str, dict[str, dict[str, Any]]] = {}
        for r in entries:
            parent, sep, sub = str(r["name"]).partition("/")
            if sep:
                subresources.setdefault(parent, {})[sub] = {
                    "kind": r.get("kind", ""),
                    "name": r["name"],
                    "namespaced": bool(r.get("namespaced", False)),
                    "verbs": r.get("verbs"),
                }
        kinds: dict[str, Resource] = {}
        for r in entries:
            name = str(r["name"])
            if "/" in name or not r.get("kind") or r["kind"] in kinds:
                continue
            kinds[r["kind"]] = Resource(
                prefix=prefix,
                group=group,
                api_version=version,
                kind=r["kind"],
                namespaced=bool(r.get("namespaced", False)),
                verbs=r.get("verbs"),
                name=name,
                preferred=True,
                client=self.client,
                singularName=r.get("singularName"),
                shortNames=r.get("shortNames"),
                categories=r.get("categories"),
                subresources=subresources.get(name),
            )
        return kinds
