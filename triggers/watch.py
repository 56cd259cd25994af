"""Watch trigger: turns changes of observed cluster objects into NodeObjectChanged events.

A node asks to observe one object (``Observe`` effect). One watch per (cluster, apiVersion, kind)
is opened lazily through the Playground and fans changes out to the nodes observing that object.
On registration the current state is delivered at once (level-based), so a change that happened
before the watch was opened is never missed; node handlers are idempotent about repeats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engine.phases import Event, EventType

if TYPE_CHECKING:
    from actors.base import Playground, WatchHandle

ObjKey = tuple[str, str, str, str | None, str]  # cluster, apiVersion, kind, namespace, name
KindKey = tuple[str, str, str]


class ObjectWatchTrigger:
    def __init__(self, playground: Playground, notify: Callable[[Event], None]) -> None:
        self._pg = playground
        self._notify = notify
        self._watches: dict[KindKey, WatchHandle] = {}
        self._observers: dict[ObjKey, set[tuple[str, str]]] = {}
        self._by_node: dict[tuple[str, str], set[ObjKey]] = {}

    def observe(
        self,
        workflow: str,
        node: str,
        cluster: str,
        api_version: str,
        kind: str,
        namespace: str | None,
        name: str,
    ) -> None:
        if not self._pg.namespaced(cluster, api_version, kind):
            namespace = None
        okey: ObjKey = (cluster, api_version, kind, namespace, name)
        who = (workflow, node)
        self._observers.setdefault(okey, set()).add(who)
        self._by_node.setdefault(who, set()).add(okey)
        kkey: KindKey = (cluster, api_version, kind)
        if kkey not in self._watches:
            self._watches[kkey] = self._pg.watch(cluster, api_version, kind, None, self._handler(kkey))
        obj = self._pg.get(cluster, api_version, kind, namespace, name)
        self._notify(Event(workflow, node, EventType.NODE_OBJECT_CHANGED, obj))

    def unobserve_node(self, workflow: str, node: str) -> None:
        keys = self._by_node.pop((workflow, node), None)
        if not keys:
            return
        for okey in keys:
            obs = self._observers.get(okey)
            if obs is not None:
                obs.discard((workflow, node))
                if not obs:
                    del self._observers[okey]

    def observed(self) -> int:
        return len(self._observers)

    def _handler(self, kkey: KindKey) -> Callable[[str, dict[str, Any]], None]:
        cluster, api_version, kind = kkey

        def on_event(event_type: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            okey: ObjKey = (cluster, api_version, kind, meta.get("namespace"), meta.get("name", ""))
            obs = self._observers.get(okey)
            if not obs:
                return
            payload = None if event_type == "DELETED" else obj
            for wf, node in sorted(obs):
                self._notify(Event(wf, node, EventType.NODE_OBJECT_CHANGED, payload))

        return on_event

    def close(self) -> None:
        for h in self._watches.values():
            h.stop()
        self._watches.clear()
