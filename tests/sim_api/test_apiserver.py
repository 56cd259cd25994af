"""CRUD, metadata, validation, optimistic concurrency, patches, status subresource, kinds."""

from __future__ import annotations

import json
from typing import Any

import pytest

from actors.sim import (
    AlreadyExistsError,
    APIError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    InvalidError,
    NotFoundError,
    SimAPIServer,
    api_error_for,
)
from actors.sim.apiserver import CounterUIDSource
from engine.clock import VirtualClock


def cm(name: str, ns: str | None = None, labels: dict[str, str] | None = None, **data: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns:
        meta["namespace"] = ns
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": dict(data)}


def pod(name: str, ns: str = "default", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


# ------------------------------------------------------------------ create / get


def test_create_sets_server_metadata(api: SimAPIServer, clock: VirtualClock) -> None:
    clock.advance(1.5)
    out = api.create(cm("a", k="v"))
    meta = out["metadata"]
    assert meta["name"] == "a"
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert meta["creationTimestamp"] == "2026-01-01T00:00:01.500Z"
    assert int(meta["resourceVersion"]) > 0
    assert len(meta["uid"]) == 36 and meta["uid"].count("-") == 4
    assert api.get("ConfigMap", "a") == out


def test_default_namespaces_exist_as_objects(api: SimAPIServer) -> None:
    names = [n["metadata"]["name"] for n in api.list("Namespace")["items"]]
    assert {"default", "kube-system"} <= set(names)
    ns = api.get("Namespace", "default")
    assert ns["status"]["phase"] == "Active"
    assert ns["spec"]["finalizers"] == ["kubernetes"]


def test_namespace_must_exist(api: SimAPIServer) -> None:
    with pytest.raises(NotFoundError) as e:
        api.create(cm("a", ns="nope"))
    assert e.value.code == 404
    assert 'namespaces "nope" not found' in e.value.message
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "nope"}})
    assert api.create(cm("a", ns="nope"))["metadata"]["namespace"] == "nope"


def test_cluster_scoped_kinds_ignore_namespace(api: SimAPIServer) -> None:
    node = api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "namespace": "x"}})
    assert "namespace" not in node["metadata"]
    assert api.get("Node", "n1", "whatever")["metadata"]["name"] == "n1"


def test_already_exists(api: SimAPIServer) -> None:
    api.create(cm("a"))
    with pytest.raises(AlreadyExistsError) as e:
        api.create(cm("a"))
    assert (e.value.code, e.value.reason) == (409, "AlreadyExists")
    assert e.value.message == 'configmaps "a" already exists'
    status = e.value.to_status()
    assert status["kind"] == "Status" and status["code"] == 409 and status["details"]["name"] == "a"


def test_not_found_messages(api: SimAPIServer) -> None:
    with pytest.raises(NotFoundError, match='configmaps "x" not found'):
        api.get("ConfigMap", "x")
    with pytest.raises(NotFoundError, match=r'jobs\.batch "x" not found'):
        api.get("Job", "x")


def test_unknown_kind(api: SimAPIServer) -> None:
    with pytest.raises(NotFoundError, match="the server could not find the requested resource"):
        api.get("Widget", "x")
    with pytest.raises(NotFoundError, match="the server could not find the requested resource"):
        api.create({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}})


def test_kind_resolution_aliases(api: SimAPIServer) -> None:
    for alias in ("Pod", "pods", "pod", "po", "v1/Pod"):
        assert api.resolve(alias).kind == "Pod"
    assert api.resolve("deployments.apps").kind == "Deployment"
    assert api.resolve("apps/v1/Deployment").api_version == "apps/v1"
    assert api.resolve("Job", "batch/v1").resource == "jobs.batch"
    assert api.resolve("leases").group == "coordination.k8s.io"
    assert api.resolve("crd").kind == "CustomResourceDefinition"
    with pytest.raises(NotFoundError):
        api.resolve("Pod", "apps/v1")


def test_returned_objects_are_copies(api: SimAPIServer) -> None:
    src = cm("a", k="v")
    out = api.create(src)
    src["data"]["k"] = "mutated-input"
    out["data"]["k"] = "mutated-output"
    got = api.get("ConfigMap", "a")
    got["metadata"]["labels"] = {"x": "y"}
    assert api.get("ConfigMap", "a")["data"] == {"k": "v"}
    assert "labels" not in api.get("ConfigMap", "a")["metadata"]


def test_non_json_input_rejected(api: SimAPIServer) -> None:
    with pytest.raises(BadRequestError):
        api.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": {1, 2}}}
        )
    with pytest.raises(BadRequestError):
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "x": float("nan")})
    # tuples are normalised to lists
    out = api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "x": (1, 2)})
    assert out["x"] == [1, 2]


def test_resource_version_must_not_be_set_on_create(api: SimAPIServer) -> None:
    obj = cm("a")
    obj["metadata"]["resourceVersion"] = "5"
    with pytest.raises(BadRequestError, match="resourceVersion should not be set"):
        api.create(obj)


def test_client_cannot_set_server_fields(api: SimAPIServer) -> None:
    obj = cm("a")
    obj["metadata"].update(uid="mine", generation=7, creationTimestamp="1999-01-01T00:00:00Z")
    out = api.create(obj)
    assert out["metadata"]["uid"] != "mine"
    assert out["metadata"]["generation"] == 1
    assert out["metadata"]["creationTimestamp"].startswith("2026-")


@pytest.mark.parametrize(
    "name", ["UPPER", "-lead", "trail-", "a_b", "a" * 254, "", "has space", "a..b", "dot."]
)
def test_invalid_names(api: SimAPIServer, name: str) -> None:
    with pytest.raises((InvalidError, BadRequestError)) as e:
        api.create(cm(name) if name else {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})
    assert e.value.code == 422


def test_valid_names(api: SimAPIServer) -> None:
    api.create(cm("a.b-c.d9"))
    api.create(cm("x" * 253))
    with pytest.raises(InvalidError, match="RFC 1123 label"):
        api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a.b"}})
    with pytest.raises(InvalidError, match="DNS-1035"):
        api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "1svc"}, "spec": {}})


def test_label_and_annotation_validation(api: SimAPIServer) -> None:
    with pytest.raises(InvalidError, match=r"metadata\.labels"):
        api.create(cm("a", labels={"bad key": "v"}))
    with pytest.raises(InvalidError, match=r"metadata\.labels"):
        api.create(cm("a", labels={"k": "bad value!"}))
    with pytest.raises(InvalidError, match=r"metadata\.labels"):
        api.create(cm("a", labels={"k": "x" * 64}))
    with pytest.raises(InvalidError, match=r"metadata\.annotations"):
        api.create(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "annotations": {"k": 1}}}
        )
    api.create(cm("ok", labels={"app.kubernetes.io/name": "x", "empty": ""}))


def test_generate_name_is_deterministic() -> None:
    def run() -> list[str]:
        api = SimAPIServer(VirtualClock(), name="same")
        return [
            api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "job-"}})[
                "metadata"
            ]["name"]
            for _ in range(20)
        ]

    names = run()
    assert names == run()
    assert len(set(names)) == 20
    for n in names:
        assert n.startswith("job-") and len(n) == 9
        assert set(n[4:]) <= set("bcdfghjklmnpqrstvwxz2456789")


def test_uids_deterministic_and_custom_source() -> None:
    a = SimAPIServer(VirtualClock(), name="c1")
    b = SimAPIServer(VirtualClock(), name="c1")
    c = SimAPIServer(VirtualClock(), name="c2")
    ua = a.create(cm("x"))["metadata"]["uid"]
    assert ua == b.create(cm("x"))["metadata"]["uid"]
    assert ua != c.create(cm("x"))["metadata"]["uid"]
    counter = iter(range(100))
    d = SimAPIServer(VirtualClock(), uid_source=lambda: f"uid-{next(counter)}")
    assert d.create(cm("x"))["metadata"]["uid"].startswith("uid-")
    src = CounterUIDSource("s")
    first = src()
    src.set_state(0)
    assert src() == first


def test_namespace_mismatch(api: SimAPIServer) -> None:
    with pytest.raises(BadRequestError, match="does not match"):
        api.create(cm("a", ns="kube-system"), namespace="default")


# ------------------------------------------------------------------ list / selectors


def test_list_is_sorted_and_filtered(api: SimAPIServer) -> None:
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "b-ns"}})
    for ns, name, labels in [
        ("default", "zeta", {"app": "web", "tier": "fe"}),
        ("default", "alpha", {"app": "db"}),
        ("b-ns", "mid", {"app": "web", "env": "prod"}),
        ("kube-system", "sys", {}),
    ]:
        api.create(cm(name, ns=ns, labels=labels))
    lst = api.list("ConfigMap")
    assert lst["kind"] == "ConfigMapList" and lst["apiVersion"] == "v1"
    assert int(lst["metadata"]["resourceVersion"]) == int(api.resource_version())
    keys = [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in lst["items"]]
    assert keys == sorted(keys)
    assert [o["metadata"]["name"] for o in api.list("ConfigMap", "default")["items"]] == ["alpha", "zeta"]

    def names(sel: Any = None, fields: str | None = None, ns: str | None = None) -> list[str]:
        return [o["metadata"]["name"] for o in api.list("cm", ns, sel, fields)["items"]]

    assert names("app=web") == ["mid", "zeta"]
    assert names("app==web,env=prod") == ["mid"]
    assert names("app!=web") == ["alpha", "sys"]  # != matches objects without the label
    assert names("app in (db, web),tier notin (fe)") == ["mid", "alpha"]
    assert names("env") == ["mid"]
    assert names("!app") == ["sys"]
    assert names(
        {"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}
    ) == ["zeta"]
    assert names({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}) == [
        "alpha",
        "sys",
    ]
    assert names({"app": "db"}) == ["alpha"]  # a plain dict is matchLabels
    assert names(fields="metadata.name=zeta") == ["zeta"]
    assert names(fields="metadata.namespace!=default") == ["mid", "sys"]
    assert names(fields="metadata.namespace==default,metadata.name!=zeta") == ["alpha"]
    assert names(fields="data.missing=") == ["mid", "alpha", "zeta", "sys"]
    assert api.count("ConfigMap") == 4 and api.count("ConfigMap", "default") == 2


def test_field_selectors_on_pods(api: SimAPIServer) -> None:
    api.create(pod("p1", nodeName="n1"))
    api.create(pod("p2"))
    assert [p["metadata"]["name"] for p in api.list("Pod", field_selector="spec.nodeName=n1")["items"]] == [
        "p1"
    ]
    assert [p["metadata"]["name"] for p in api.list("Pod", field_selector="spec.nodeName=")["items"]] == [
        "p2"
    ]
    assert len(api.list("Pod", field_selector="status.phase=Pending")["items"]) == 2
    assert api.list("Pod", field_selector="status.phase!=Pending")["items"] == []


@pytest.mark.parametrize(
    "bad", ["a in ()", "a in (x", "=b", "a=b,", "a notin x", "!", "a>b", "bad key=1", "k=bad value!"]
)
def test_invalid_label_selectors(api: SimAPIServer, bad: str) -> None:
    with pytest.raises(BadRequestError):
        api.list("ConfigMap", label_selector=bad)


def test_invalid_selector_dicts(api: SimAPIServer) -> None:
    with pytest.raises(BadRequestError):
        api.list("cm", label_selector={"matchExpressions": [{"key": "a", "operator": "In", "values": []}]})
    with pytest.raises(BadRequestError):
        api.list(
            "cm", label_selector={"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}
        )
    with pytest.raises(BadRequestError):
        api.list("cm", label_selector={"matchExpressions": [{"key": "a", "operator": "Like"}]})
    with pytest.raises(BadRequestError):
        api.list("cm", field_selector="nonsense")


def test_gt_lt_selectors(api: SimAPIServer) -> None:
    api.create(cm("a", labels={"n": "3"}))
    api.create(cm("b", labels={"n": "10"}))
    api.create(cm("c", labels={"n": "x"}))
    assert [o["metadata"]["name"] for o in api.list("cm", label_selector="n>5")["items"]] == ["b"]
    assert [o["metadata"]["name"] for o in api.list("cm", label_selector="n<5")["items"]] == ["a"]


# ------------------------------------------------------------------ update / patch


def test_update_conflict_and_unconditional(api: SimAPIServer) -> None:
    a = api.create(cm("a", k="1"))
    stale = dict(a)
    a["data"] = {"k": "2"}
    b = api.update(a)
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    stale["data"] = {"k": "3"}
    with pytest.raises(ConflictError) as e:
        api.update(stale)
    assert (e.value.code, e.value.reason) == (409, "Conflict")
    assert "the object has been modified" in e.value.message
    del stale["metadata"]["resourceVersion"]
    assert api.update(stale)["data"] == {"k": "3"}  # no resourceVersion: unconditional
    with pytest.raises(NotFoundError):
        api.update(cm("missing"))


def test_noop_update_changes_nothing(api: SimAPIServer) -> None:
    events: list[str] = []
    a = api.create(cm("a", k="1"))
    api.watch(
        "ConfigMap", resource_version=a["metadata"]["resourceVersion"], callback=lambda t, o: events.append(t)
    )
    b = api.update(a)
    c = api.patch("ConfigMap", "a", {"data": {"k": "1"}})
    assert (
        a["metadata"]["resourceVersion"]
        == b["metadata"]["resourceVersion"]
        == c["metadata"]["resourceVersion"]
    )
    assert events == []


def test_generation_bumps_on_spec_changes_only(api: SimAPIServer) -> None:
    p = api.create(pod("p"))
    assert p["metadata"]["generation"] == 1
    p = api.patch("Pod", "p", {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}}})
    assert p["metadata"]["generation"] == 1
    p = api.patch_status("Pod", "p", {"status": {"phase": "Running"}})
    assert p["metadata"]["generation"] == 1
    p = api.patch("Pod", "p", {"spec": {"activeDeadlineSeconds": 5}})
    assert p["metadata"]["generation"] == 2


def test_resource_version_is_cluster_wide_and_monotonic(api: SimAPIServer) -> None:
    rvs = [int(api.create(cm(f"c{i}"))["metadata"]["resourceVersion"]) for i in range(3)]
    rvs.append(int(api.create(pod("p"))["metadata"]["resourceVersion"]))
    rvs.append(int(api.patch("cm", "c0", {"data": {"a": "b"}})["metadata"]["resourceVersion"]))
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)
    assert api.resource_version() == str(rvs[-1])


def test_immutable_fields(api: SimAPIServer) -> None:
    api.create(cm("a"))
    for field, value in (("uid", "other"), ("name", "b"), ("namespace", "kube-system")):
        with pytest.raises(InvalidError, match="field is immutable"):
            api.patch("ConfigMap", "a", {"metadata": {field: value}})


def test_merge_patch_rfc7386(api: SimAPIServer) -> None:
    api.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "a", "labels": {"keep": "1", "drop": "2"}},
            "data": {"x": "1", "y": "2"},
            "list": [1, 2, 3],
            "nested": {"a": {"b": 1, "c": 2}},
        }
    )
    out = api.patch(
        "ConfigMap",
        "a",
        {
            "metadata": {"labels": {"drop": None, "new": "3"}},
            "data": {"y": None, "z": "3"},
            "list": [9],
            "nested": {"a": {"b": None}, "d": {"e": None, "f": 1}},
        },
    )
    assert out["metadata"]["labels"] == {"keep": "1", "new": "3"}
    assert out["data"] == {"x": "1", "z": "3"}
    assert out["list"] == [9]
    assert out["nested"] == {"a": {"c": 2}, "d": {"f": 1}}
    # strategic is treated as merge; a JSON string patch is accepted
    out = api.patch("ConfigMap", "a", json.dumps({"data": {"w": "4"}}), patch_type="strategic")
    assert out["data"]["w"] == "4"


def test_merge_patch_resource_version_precondition(api: SimAPIServer) -> None:
    a = api.create(cm("a"))
    api.patch("ConfigMap", "a", {"data": {"k": "1"}})
    with pytest.raises(ConflictError):
        api.patch(
            "ConfigMap", "a", {"metadata": {"resourceVersion": a["metadata"]["resourceVersion"]}, "data": {}}
        )


def test_json_patch(api: SimAPIServer) -> None:
    api.create(cm("a", k="1"))
    out = api.patch(
        "ConfigMap",
        "a",
        [
            {"op": "add", "path": "/data/n", "value": "2"},
            {"op": "replace", "path": "/data/k", "value": "x"},
            {"op": "add", "path": "/metadata/labels", "value": {"l": "v"}},
        ],
        patch_type="json",
    )
    assert out["data"] == {"k": "x", "n": "2"}
    assert out["metadata"]["labels"] == {"l": "v"}
    out = api.patch("ConfigMap", "a", [{"op": "remove", "path": "/data/n"}], patch_type="json")
    assert out["data"] == {"k": "x"}
    with pytest.raises(InvalidError) as e:
        api.patch("ConfigMap", "a", [{"op": "test", "path": "/data/k", "value": "nope"}], patch_type="json")
    assert e.value.code == 422
    with pytest.raises(InvalidError):
        api.patch("ConfigMap", "a", [{"op": "remove", "path": "/data/missing"}], patch_type="json")
    with pytest.raises(BadRequestError):
        api.patch("ConfigMap", "a", [{"op": "frobnicate", "path": "/x"}], patch_type="json")
    with pytest.raises(BadRequestError):
        api.patch("ConfigMap", "a", {"not": "a list"}, patch_type="json")
    with pytest.raises(BadRequestError):
        api.patch("ConfigMap", "a", {}, patch_type="apply")  # type: ignore[arg-type]
    assert api.get("ConfigMap", "a")["data"] == {"k": "x"}


def test_patch_missing_object(api: SimAPIServer) -> None:
    with pytest.raises(NotFoundError):
        api.patch("ConfigMap", "nope", {"data": {}})


# ------------------------------------------------------------------ status subresource


def test_status_subresource_semantics(api: SimAPIServer) -> None:
    p = api.create(pod("p"))
    assert p["status"]["phase"] == "Pending"  # status set by the pod strategy on create
    # a main-resource write ignores status changes
    p["status"] = {"phase": "Running"}
    p["metadata"]["labels"] = {"a": "b"}
    p = api.update(p)
    assert p["status"]["phase"] == "Pending" and p["metadata"]["labels"] == {"a": "b"}
    p = api.patch("Pod", "p", {"status": {"phase": "Failed"}})
    assert p["status"]["phase"] == "Pending"
    # a status write ignores everything but status
    p["status"] = {"phase": "Running"}
    p["spec"]["nodeName"] = "sneaky"
    p["metadata"]["labels"] = {"c": "d"}
    p = api.update_status(p)
    assert p["status"] == {"phase": "Running"}
    assert "nodeName" not in p["spec"] and p["metadata"]["labels"] == {"a": "b"}
    p = api.patch_status("Pod", "p", {"status": {"phase": "Succeeded"}, "spec": {"nodeName": "x"}})
    assert p["status"]["phase"] == "Succeeded" and "nodeName" not in p["spec"]


def test_status_is_dropped_on_create_for_status_kinds(api: SimAPIServer) -> None:
    dep = api.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "d"},
            "spec": {},
            "status": {"x": 1},
        }
    )
    assert "status" not in dep
    node = api.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "status": {"capacity": {}}}
    )
    assert node["status"] == {"capacity": {}}  # nodes register with status


def test_kinds_without_status_subresource(api: SimAPIServer) -> None:
    api.create(cm("a"))
    with pytest.raises(NotFoundError, match="could not find the requested resource"):
        api.patch_status("ConfigMap", "a", {"status": {}})
    # without a status subresource the main resource writes status (and it bumps generation)
    out = api.patch("ConfigMap", "a", {"status": {"x": "y"}})
    assert out["status"] == {"x": "y"} and out["metadata"]["generation"] == 2


def test_register_kind(api: SimAPIServer) -> None:
    rt = api.register_kind("example.com", "v1", "Widget", has_status_subresource=True, short_names=["wd"])
    assert rt.plural == "widgets" and rt.namespaced
    w = api.create(
        {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {"a": 1}}
    )
    assert "status" not in w
    assert api.get("wd", "w")["kind"] == "Widget"
    assert api.patch_status("widgets.example.com", "w", {"status": {"ready": True}})["status"] == {
        "ready": True
    }
    box = api.register_kind("example.com", "v1", "Box", namespaced=False)
    assert box.plural == "boxes" and not box.namespaced


def test_job_defaults_and_validation(api: SimAPIServer) -> None:
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
    job = api.create(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": template}}
    )
    spec = job["spec"]
    uid = job["metadata"]["uid"]
    assert (spec["completions"], spec["parallelism"], spec["backoffLimit"]) == (1, 1, 6)
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    labels = spec["template"]["metadata"]["labels"]
    assert labels["job-name"] == "j" and labels["controller-uid"] == uid
    assert job["metadata"]["labels"]["job-name"] == "j"
    assert job["status"] == {}
    bad = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # restartPolicy Always
    with pytest.raises(InvalidError, match="restartPolicy"):
        api.create(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "k"}, "spec": {"template": bad}}
        )


def test_pod_validation_and_defaults(api: SimAPIServer) -> None:
    with pytest.raises(InvalidError, match="containers"):
        api.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"containers": []}})
    with pytest.raises(InvalidError, match="image"):
        api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c"}]},
            }
        )
    p = api.create(pod("p"))
    assert p["spec"]["restartPolicy"] == "Always" and p["spec"]["terminationGracePeriodSeconds"] == 30
    assert p["status"]["qosClass"] == "BestEffort"
    g = api.create(
        pod(
            "g",
            containers=[{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        )
    )
    assert g["status"]["qosClass"] == "Guaranteed"


def test_bind_subresource(api: SimAPIServer) -> None:
    api.create(pod("p"))
    out = api.bind("default", "p", "node-1", annotations={"scheduler/by": "sim"})
    assert out["spec"]["nodeName"] == "node-1"
    assert out["metadata"]["annotations"] == {"scheduler/by": "sim"}
    assert [c["type"] for c in out["status"]["conditions"]] == ["PodScheduled"]
    with pytest.raises(ConflictError, match="already assigned"):
        api.bind("default", "p", "node-2")


def test_logs_subresource_without_kubelet(api: SimAPIServer) -> None:
    api.create(pod("p"))
    assert api.logs("default", "p") == ""
    api.create(pod("two", containers=[{"name": "a", "image": "i"}, {"name": "b", "image": "i"}]))
    with pytest.raises(BadRequestError, match="a container name must be specified"):
        api.logs("default", "two")
    with pytest.raises(BadRequestError, match="not valid"):
        api.logs("default", "two", "zzz")
    with pytest.raises(NotFoundError):
        api.logs("default", "nope")


def test_metrics(api: SimAPIServer) -> None:
    api.create(cm("a"))
    with pytest.raises(AlreadyExistsError):
        api.create(cm("a"))
    api.get("ConfigMap", "a")
    with pytest.raises(NotFoundError):
        api.get("ConfigMap", "b")
    m = api.metrics()
    assert m["requests"]["create"] == {"201": 1, "409": 1}
    assert m["requests"]["get"] == {"200": 1, "404": 1}
    assert m["objects"]["configmaps"] == 1 and m["objects"]["namespaces"] == 4
    assert m["objects"]["jobs.batch"] == 0


def test_api_error_for() -> None:
    assert isinstance(api_error_for(404, "NotFound", "x"), NotFoundError)
    assert isinstance(api_error_for(409, "AlreadyExists", "x"), AlreadyExistsError)
    assert isinstance(api_error_for(409, "Conflict", "x"), ConflictError)
    assert isinstance(api_error_for(403, None, "x"), ForbiddenError)
    e = api_error_for(500, "InternalError", "boom")
    assert type(e) is APIError and e.code == 500
