"""Watches: initial state, replay from a resourceVersion, 410 Gone, selector transitions, order."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim import BadRequestError, GoneError, SimAPIServer
from engine.clock import VirtualClock


def cm(name: str, ns: str = "default", labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, int]] = []

    def __call__(self, etype: str, obj: dict[str, Any]) -> None:
        self.events.append((etype, obj["metadata"]["name"], int(obj["metadata"]["resourceVersion"])))

    @property
    def short(self) -> list[tuple[str, str]]:
        return [(t, n) for t, n, _ in self.events]


def test_watch_without_resource_version_sends_current_state(api: SimAPIServer) -> None:
    api.create(cm("b"))
    api.create(cm("a"))
    rec = Recorder()
    w = api.watch("ConfigMap", callback=rec)
    assert rec.short == [("ADDED", "a"), ("ADDED", "b")]
    api.create(cm("c"))
    api.patch("ConfigMap", "a", {"data": {"x": "1"}})
    api.delete("ConfigMap", "b")
    assert rec.short[2:] == [("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    rvs = [rv for _, _, rv in rec.events[2:]]
    assert rvs == sorted(rvs)
    assert w.resource_version == str(rvs[-1])
    w.stop()
    api.create(cm("d"))
    assert len(rec.events) == 5


def test_watch_from_resource_version_replays(api: SimAPIServer) -> None:
    start = api.create(cm("a"))["metadata"]["resourceVersion"]
    api.create(cm("b"))
    api.patch("ConfigMap", "a", {"data": {"k": "v"}})
    api.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}})  # other kinds skipped
    rec = Recorder()
    api.watch("ConfigMap", resource_version=start, callback=rec)
    assert rec.short == [("ADDED", "b"), ("MODIFIED", "a")]
    rec2 = Recorder()
    api.watch("ConfigMap", resource_version=api.resource_version(), callback=rec2)
    assert rec2.events == []


def test_list_then_watch_sees_no_gap(api: SimAPIServer) -> None:
    api.create(cm("a"))
    lst = api.list("ConfigMap")
    api.create(cm("b"))  # happens between list and watch
    rec = Recorder()
    api.watch("ConfigMap", resource_version=lst["metadata"]["resourceVersion"], callback=rec)
    assert rec.short == [("ADDED", "b")]


def test_watch_gone_after_compaction(api: SimAPIServer) -> None:
    rv = api.create(cm("a"))["metadata"]["resourceVersion"]
    api.create(cm("b"))
    api.compact()
    with pytest.raises(GoneError) as e:
        api.watch("ConfigMap", resource_version=rv, callback=Recorder())
    assert (e.value.code, e.value.reason) == (410, "Expired")
    assert "too old resource version" in e.value.message
    # from the current version it works
    api.watch("ConfigMap", resource_version=api.resource_version(), callback=Recorder())


def test_watch_history_is_a_bounded_ring() -> None:
    api = SimAPIServer(VirtualClock(), history_size=5)
    first = int(api.create(cm("x0"))["metadata"]["resourceVersion"])
    for i in range(1, 10):
        api.create(cm(f"x{i}"))
    with pytest.raises(GoneError):
        api.watch("ConfigMap", resource_version=first, callback=Recorder())
    rec = Recorder()
    api.watch("ConfigMap", resource_version=int(api.resource_version()) - 3, callback=rec)
    assert rec.short == [("ADDED", "x7"), ("ADDED", "x8"), ("ADDED", "x9")]
    with pytest.raises(BadRequestError):
        api.watch("ConfigMap", resource_version="abc", callback=Recorder())


def test_watch_namespace_and_selector_transitions(api: SimAPIServer) -> None:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    rec = Recorder()
    api.watch("ConfigMap", "default", "app=web", callback=rec)
    api.create(cm("a", labels={"app": "web"}))
    api.create(cm("b", labels={"app": "db"}))
    api.create(cm("c", "other", labels={"app": "web"}))
    api.patch("ConfigMap", "a", {"metadata": {"labels": {"app": "db"}}})  # leaves the selection
    api.patch("ConfigMap", "b", {"metadata": {"labels": {"app": "web"}}})  # enters it
    api.patch("ConfigMap", "b", {"data": {"k": "v"}})
    api.delete("ConfigMap", "a")  # not selected any more: no event
    api.delete("ConfigMap", "b")
    assert rec.short == [
        ("ADDED", "a"),
        ("DELETED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "b"),
        ("DELETED", "b"),
    ]


def test_watch_field_selector(api: SimAPIServer) -> None:
    rec = Recorder()
    api.watch("ConfigMap", callback=rec, field_selector="metadata.name=a")
    api.create(cm("a"))
    api.create(cm("b"))
    assert rec.short == [("ADDED", "a")]


def test_events_from_callbacks_are_delivered_in_order(api: SimAPIServer) -> None:
    """A callback that writes must not make other watchers see events out of order."""
    seen: dict[str, list[int]] = {"first": [], "second": []}

    def first(etype: str, obj: dict[str, Any]) -> None:
        seen["first"].append(int(obj["metadata"]["resourceVersion"]))
        name = obj["metadata"]["name"]
        if etype == "ADDED" and not name.startswith("echo-"):
            api.create(cm(f"echo-{name}"))

    def second(etype: str, obj: dict[str, Any]) -> None:
        seen["second"].append(int(obj["metadata"]["resourceVersion"]))

    api.watch("ConfigMap", resource_version=api.resource_version(), callback=first)
    api.watch("ConfigMap", resource_version=api.resource_version(), callback=second)
    api.create(cm("a"))
    api.create(cm("b"))
    assert seen["first"] == seen["second"]
    assert seen["first"] == sorted(seen["first"]) and len(seen["first"]) == 4
    # the echo objects exist once create() returned
    assert api.count("ConfigMap") == 4


def test_watch_delivers_copies_with_requested_version(api: SimAPIServer) -> None:
    api.register_kind("example.com", "v1", "Thing")
    api.register_kind("example.com", "v2", "Thing")
    got: list[dict[str, Any]] = []
    api.watch("Thing", callback=lambda t, o: got.append(o), api_version="example.com/v1")
    api.create({"apiVersion": "example.com/v2", "kind": "Thing", "metadata": {"name": "t"}, "spec": {"a": 1}})
    assert got[0]["apiVersion"] == "example.com/v1"
    got[0]["spec"]["a"] = 99
    assert api.get("Thing", "t")["spec"] == {"a": 1}


def test_callback_errors_are_raised_or_logged(clock: VirtualClock) -> None:
    strict = SimAPIServer(clock, raise_callback_errors=True)

    def boom(etype: str, obj: dict[str, Any]) -> None:
        raise RuntimeError("boom")

    strict.watch("ConfigMap", callback=boom)
    with pytest.raises(RuntimeError):
        strict.create(cm("a"))
    assert strict.get("ConfigMap", "a")  # the write itself committed

    lenient = SimAPIServer(clock)
    lenient.watch("ConfigMap", callback=boom)
    rec = Recorder()
    lenient.watch("ConfigMap", callback=rec)
    lenient.create(cm("a"))
    assert rec.short == [("ADDED", "a")]
    assert lenient.metrics()["callbackErrors"] == 1


def test_watch_stops_when_kind_disappears(api: SimAPIServer) -> None:
    api.create(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"kind": "Gadget", "plural": "gadgets"},
                "versions": [{"name": "v1", "served": True, "storage": True}],
            },
        }
    )
    w = api.watch("Gadget", callback=Recorder())
    api.delete("CustomResourceDefinition", "gadgets.example.com")
    assert w.stopped
