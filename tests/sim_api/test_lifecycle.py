"""Deletion: finalizers, graceful pods, garbage collection (Background/Foreground/Orphan),
namespaces, CustomResourceDefinitions."""

from __future__ import annotations

from typing import Any

import pytest

from actors.sim import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    MethodNotAllowedError,
    NotFoundError,
    SimAPIServer,
)
from engine.clock import VirtualClock


def cm(name: str, ns: str = "default", **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns, **meta}}


def owner_ref(owner: dict[str, Any], block: bool = False, controller: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": block,
        "controller": controller,
    }


def exists(api: SimAPIServer, kind: str, name: str, ns: str | None = "default") -> bool:
    try:
        api.get(kind, name, ns)
    except NotFoundError:
        return False
    return True


# ------------------------------------------------------------------ finalizers


def test_delete_without_finalizers_removes(api: SimAPIServer) -> None:
    api.create(cm("a"))
    out = api.delete("ConfigMap", "a")
    assert out["metadata"]["name"] == "a"
    assert not exists(api, "ConfigMap", "a")
    with pytest.raises(NotFoundError):
        api.delete("ConfigMap", "a")


def test_finalizers_keep_object_until_removed(api: SimAPIServer, clock: VirtualClock) -> None:
    api.create(cm("a", finalizers=["example.com/a", "example.com/b"]))
    clock.advance(2)
    out = api.delete("ConfigMap", "a")
    meta = out["metadata"]
    assert meta["deletionTimestamp"] == "2026-01-01T00:00:02Z"
    assert meta["deletionGracePeriodSeconds"] == 0
    assert meta["generation"] == 2
    # second delete is a no-op
    assert api.delete("ConfigMap", "a")["metadata"]["resourceVersion"] == meta["resourceVersion"]
    # no new finalizers on a deleting object
    with pytest.raises(InvalidError, match="no new finalizers"):
        api.patch("ConfigMap", "a", {"metadata": {"finalizers": ["example.com/a", "example.com/b", "c/d"]}})
    api.patch("ConfigMap", "a", {"metadata": {"finalizers": ["example.com/b"]}})
    assert exists(api, "ConfigMap", "a")
    events: list[tuple[str, list[str] | None]] = []
    api.watch(
        "ConfigMap",
        resource_version=api.resource_version(),
        callback=lambda t, o: events.append((t, o["metadata"].get("finalizers"))),
    )
    api.patch("ConfigMap", "a", {"metadata": {"finalizers": None}})
    assert not exists(api, "ConfigMap", "a")
    assert events == [("DELETED", None)]


def test_delete_preconditions(api: SimAPIServer) -> None:
    a = api.create(cm("a"))
    with pytest.raises(ConflictError, match="Precondition failed: UID"):
        api.delete("ConfigMap", "a", preconditions={"uid": "other"})
    with pytest.raises(ConflictError, match="ResourceVersion"):
        api.delete("ConfigMap", "a", preconditions={"resourceVersion": "1"})
    api.delete("ConfigMap", "a", preconditions={"uid": a["metadata"]["uid"]})
    assert not exists(api, "ConfigMap", "a")


def test_delete_collection(api: SimAPIServer) -> None:
    for i in range(4):
        api.create(cm(f"c{i}", labels={"grp": "x" if i % 2 else "y"}))
    out = api.delete_collection("ConfigMap", "default", label_selector="grp=x")
    assert [o["metadata"]["name"] for o in out["items"]] == ["c1", "c3"]
    assert [o["metadata"]["name"] for o in api.list("ConfigMap")["items"]] == ["c0", "c2"]


# ------------------------------------------------------------------ graceful pods


def running_pod(api: SimAPIServer, name: str, **meta: Any) -> dict[str, Any]:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", **meta},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    return api.patch_status("Pod", name, {"status": {"phase": "Running"}})


def test_graceful_pod_deletion(api: SimAPIServer, clock: VirtualClock) -> None:
    running_pod(api, "p")
    out = api.delete("Pod", "p")
    assert out["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:30Z"
    assert out["metadata"]["deletionGracePeriodSeconds"] == 30
    # a longer grace period does not extend, a shorter one shortens
    assert api.delete("Pod", "p", grace_period_seconds=60)["metadata"]["deletionGracePeriodSeconds"] == 30
    assert (
        api.delete("Pod", "p", grace_period_seconds=5)["metadata"]["deletionTimestamp"]
        == "2026-01-01T00:00:05Z"
    )
    # the kubelet's final delete (grace 0) removes it
    api.delete("Pod", "p", grace_period_seconds=0)
    assert not exists(api, "Pod", "p")


def test_unscheduled_or_finished_pods_delete_at_once(api: SimAPIServer) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
    )
    api.delete("Pod", "p")
    assert not exists(api, "Pod", "p")
    running_pod(api, "done")
    api.patch_status("Pod", "done", {"status": {"phase": "Succeeded"}})
    api.delete("Pod", "done")
    assert not exists(api, "Pod", "done")


def test_final_pod_delete_with_finalizer(api: SimAPIServer) -> None:
    running_pod(api, "p", finalizers=["x/y"])
    api.delete("Pod", "p")
    out = api.delete("Pod", "p", grace_period_seconds=0)
    assert out["metadata"]["deletionGracePeriodSeconds"] == 0
    assert out["metadata"]["deletionTimestamp"] == "2026-01-01T00:00:00Z"
    api.patch("Pod", "p", {"metadata": {"finalizers": []}})
    assert not exists(api, "Pod", "p")


# ------------------------------------------------------------------ garbage collection


def family(api: SimAPIServer, block: bool = False) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    owner = api.create(cm("owner"))
    child = api.create(cm("child", ownerReferences=[owner_ref(owner, block=block, controller=True)]))
    grandchild = api.create(cm("grandchild", ownerReferences=[owner_ref(child, block=block)]))
    return owner, child, grandchild


def test_background_gc(api: SimAPIServer) -> None:
    family(api)
    order: list[tuple[str, str]] = []
    api.watch(
        "ConfigMap",
        resource_version=api.resource_version(),
        callback=lambda t, o: order.append((t, o["metadata"]["name"])),
    )
    api.delete("ConfigMap", "owner", propagation="Background")
    assert order == [("DELETED", "owner"), ("DELETED", "child"), ("DELETED", "grandchild")]
    assert api.list("ConfigMap")["items"] == []


def test_background_is_default(api: SimAPIServer) -> None:
    family(api)
    api.delete("ConfigMap", "owner")
    assert api.list("ConfigMap")["items"] == []


def test_gc_waits_for_all_owners(api: SimAPIServer) -> None:
    a = api.create(cm("a"))
    b = api.create(cm("b"))
    api.create(cm("shared", ownerReferences=[owner_ref(a), owner_ref(b)]))
    api.delete("ConfigMap", "a")
    shared = api.get("ConfigMap", "shared")
    assert [r["name"] for r in shared["metadata"]["ownerReferences"]] == ["b"]  # dangling ref removed
    api.delete("ConfigMap", "b")
    assert not exists(api, "ConfigMap", "shared")


def test_dependent_of_missing_owner_is_collected(api: SimAPIServer) -> None:
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "uid": "no-such-uid"}}
    api.create(cm("orphan", ownerReferences=[owner_ref(ghost)]))
    assert not exists(api, "ConfigMap", "orphan")


def test_dependent_with_finalizer_lingers(api: SimAPIServer) -> None:
    owner = api.create(cm("owner"))
    api.create(cm("child", finalizers=["x/y"], ownerReferences=[owner_ref(owner)]))
    api.delete("ConfigMap", "owner")
    child = api.get("ConfigMap", "child")
    assert "deletionTimestamp" in child["metadata"]


def test_orphan_propagation(api: SimAPIServer) -> None:
    family(api)
    api.delete("ConfigMap", "owner", propagation="Orphan")
    assert not exists(api, "ConfigMap", "owner")
    child = api.get("ConfigMap", "child")
    assert "ownerReferences" not in child["metadata"]
    assert exists(api, "ConfigMap", "grandchild")  # only one level is orphaned
    assert api.get("ConfigMap", "grandchild")["metadata"]["ownerReferences"][0]["name"] == "child"


def test_foreground_propagation(api: SimAPIServer) -> None:
    family(api, block=True)
    api.patch("ConfigMap", "grandchild", {"metadata": {"finalizers": ["test/hold"]}})
    out = api.delete("ConfigMap", "owner", propagation="Foreground")
    assert out["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert "deletionTimestamp" in out["metadata"]
    # the child is deleted in the foreground too (it has dependents); the grandchild is held
    child = api.get("ConfigMap", "child")
    assert child["metadata"]["finalizers"] == ["foregroundDeletion"]
    assert "deletionTimestamp" in api.get("ConfigMap", "grandchild")["metadata"]
    assert exists(api, "ConfigMap", "owner")
    # releasing the grandchild lets the whole chain go, bottom-up
    order: list[str] = []
    api.watch(
        "ConfigMap",
        resource_version=api.resource_version(),
        callback=lambda t, o: order.append(f"{t}:{o['metadata']['name']}"),
    )
    api.patch("ConfigMap", "grandchild", {"metadata": {"finalizers": None}})
    assert order == ["DELETED:grandchild", "DELETED:child", "DELETED:owner"]


def test_foreground_only_waits_for_blocking_dependents(api: SimAPIServer) -> None:
    owner = api.create(cm("owner"))
    api.create(cm("nonblocking", finalizers=["t/x"], ownerReferences=[owner_ref(owner, block=False)]))
    api.delete("ConfigMap", "owner", propagation="Foreground")
    assert not exists(api, "ConfigMap", "owner")
    assert "deletionTimestamp" in api.get("ConfigMap", "nonblocking")["metadata"]


def test_job_default_propagation_is_orphan(api: SimAPIServer) -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}
    job = api.create(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}}
    )
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "jp", "ownerReferences": [owner_ref(job, block=True, controller=True)]},
            "spec": template["spec"],
        }
    )
    api.delete("Job", "j")
    assert "ownerReferences" not in api.get("Pod", "jp")["metadata"]


def test_gc_respects_namespaces(api: SimAPIServer) -> None:
    owner = api.create(cm("owner"))
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    # an owner in another namespace does not count: the dependent is collected
    api.create(cm("x", ns="other", ownerReferences=[owner_ref(owner)]))
    assert not exists(api, "ConfigMap", "x", "other")
    # a cluster-scoped owner works for a namespaced dependent
    node = api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
    api.create(cm("y", ns="other", ownerReferences=[owner_ref(node)]))
    assert exists(api, "ConfigMap", "y", "other")
    api.delete("Node", "n1")
    assert not exists(api, "ConfigMap", "y", "other")


# ------------------------------------------------------------------ namespaces


def test_namespace_deletion(api: SimAPIServer) -> None:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns1"}})
    api.create(cm("a", ns="ns1"))
    api.create(cm("held", ns="ns1", finalizers=["t/x"]))
    out = api.delete("Namespace", "ns1")
    assert out["status"]["phase"] == "Terminating"
    assert not exists(api, "ConfigMap", "a", "ns1")
    assert exists(api, "Namespace", "ns1", None)
    with pytest.raises(ForbiddenError, match="because it is being terminated"):
        api.create(cm("new", ns="ns1"))
    api.patch("ConfigMap", "held", {"metadata": {"finalizers": None}}, "ns1")
    assert not exists(api, "Namespace", "ns1", None)


def test_protected_namespaces(api: SimAPIServer) -> None:
    for ns in ("default", "kube-system"):
        with pytest.raises(ForbiddenError, match="may not be deleted"):
            api.delete("Namespace", ns)


# ------------------------------------------------------------------ CRDs


def widget_crd(scope: str = "Namespaced", status: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {"name": "v1", "served": True, "storage": True}
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": scope,
            "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "shortNames": ["wd"]},
            "versions": [version, {"name": "v1beta1", "served": True, "storage": False}],
        },
    }


def test_crd_registers_kind(api: SimAPIServer) -> None:
    with pytest.raises(NotFoundError):
        api.resolve("Widget")
    crd = api.create(widget_crd())
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds == {"NamesAccepted": "True", "Established": "True"}
    assert crd["metadata"]["finalizers"] == ["customresourcecleanup.apiextensions.k8s.io"]
    rt = api.resolve("wd")
    assert (rt.group, rt.version, rt.kind, rt.namespaced, rt.has_status_subresource) == (
        "example.com",
        "v1",
        "Widget",
        True,
        True,
    )
    w = api.create(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"a": 1}}
    )
    assert w["metadata"]["namespace"] == "default"
    # served in both versions; apiVersion follows the request
    beta = api.get("Widget", "w1", api_version="example.com/v1beta1")
    assert beta["apiVersion"] == "example.com/v1beta1" and beta["spec"] == {"a": 1}
    assert api.get("widgets.example.com", "w1")["apiVersion"] == "example.com/v1"
    assert api.patch_status("Widget", "w1", {"status": {"ok": True}})["status"] == {"ok": True}
    assert api.patch("Widget", "w1", {"spec": {"a": 2}})["metadata"]["generation"] == 2


def test_crd_validation(api: SimAPIServer) -> None:
    bad = widget_crd()
    bad["metadata"]["name"] = "wrong.example.com"
    with pytest.raises(InvalidError, match=r"spec\.names\.plural"):
        api.create(bad)
    bad = widget_crd()
    bad["spec"]["group"] = "nodots"
    bad["metadata"]["name"] = "widgets.nodots"
    with pytest.raises(InvalidError, match=r"spec\.group"):
        api.create(bad)
    bad = widget_crd()
    bad["spec"]["versions"][1]["storage"] = True
    with pytest.raises(InvalidError, match="storage version"):
        api.create(bad)


def test_crd_deletion_removes_kind_and_objects(api: SimAPIServer) -> None:
    api.create(widget_crd())
    api.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}})
    api.create(
        {
            "apiVersion": "example.com/v1",
            "kind": "Widget",
            "metadata": {"name": "held", "finalizers": ["t/x"]},
        }
    )
    crd = api.delete("CustomResourceDefinition", "widgets.example.com")
    assert any(c["type"] == "Terminating" and c["status"] == "True" for c in crd["status"]["conditions"])
    assert [w["metadata"]["name"] for w in api.list("Widget")["items"]] == ["held"]
    with pytest.raises(MethodNotAllowedError):
        api.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w2"}})
    api.patch("Widget", "held", {"metadata": {"finalizers": None}})
    with pytest.raises(NotFoundError):
        api.get("CustomResourceDefinition", "widgets.example.com")
    with pytest.raises(NotFoundError, match="could not find the requested resource"):
        api.list("Widget")
    assert "widgets.example.com" not in api.object_counts()


def test_cluster_scoped_crd(api: SimAPIServer) -> None:
    api.create(widget_crd(scope="Cluster", status=False))
    w = api.create(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "x"}}
    )
    assert "namespace" not in w["metadata"]
    # no status subresource: status is part of the main resource
    assert api.patch("Widget", "w", {"status": {"a": 1}})["status"] == {"a": 1}


def test_crd_update_changes_served_versions(api: SimAPIServer) -> None:
    crd = api.create(widget_crd())
    crd["spec"]["versions"] = [crd["spec"]["versions"][0]]
    api.update(crd)
    with pytest.raises(NotFoundError):
        api.resolve("Widget", "example.com/v1beta1")
    assert api.resolve("Widget").version == "v1"
