"""Property tests: random operation sequences against a simple model."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.sim import APIError, SimAPIServer
from engine.clock import VirtualClock

NAMES = st.sampled_from(["a", "b", "c", "d", "e"])
LABEL_VALUES = st.sampled_from(["x", "y", "z"])
LABELS = st.dictionaries(st.sampled_from(["app", "tier", "env"]), LABEL_VALUES, max_size=3)

OPS = st.one_of(
    st.tuples(st.just("create"), NAMES, LABELS, st.booleans()),
    st.tuples(st.just("patch"), NAMES, LABELS, st.integers(0, 9)),
    st.tuples(st.just("update"), NAMES, st.booleans()),
    st.tuples(st.just("delete"), NAMES),
    st.tuples(st.just("unfinalize"), NAMES),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=40))
def test_random_operations_keep_invariants(ops: list[tuple[Any, ...]]) -> None:
    api = SimAPIServer(VirtualClock(), name="prop", raise_callback_errors=True)
    model: dict[str, dict[str, Any]] = {}  # name -> {"labels", "data", "finalizer", "deleting"}
    watched: dict[str, dict[str, Any]] = {}
    seen_rvs: list[int] = []

    def on_event(etype: str, obj: dict[str, Any]) -> None:
        seen_rvs.append(int(obj["metadata"]["resourceVersion"]))
        if etype == "DELETED":
            watched.pop(obj["metadata"]["name"], None)
        else:
            watched[obj["metadata"]["name"]] = obj

    api.watch("ConfigMap", callback=on_event)
    last_rv = int(api.resource_version())
    for op in ops:
        kind, name = op[0], op[1]
        try:
            if kind == "create":
                meta: dict[str, Any] = {"name": name, "labels": op[2]}
                if op[3]:
                    meta["finalizers"] = ["test/hold"]
                out = api.create(
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": "0"}}
                )
                assert name not in model
                model[name] = {"labels": op[2], "data": "0", "finalizer": op[3], "deleting": False}
            elif kind == "patch":
                out = api.patch(
                    "ConfigMap", name, {"metadata": {"labels": op[2] or None}, "data": {"v": str(op[3])}}
                )
                entry = model[name]
                # merge patch: null removes the labels map, an object merges into it
                entry["labels"] = {**entry["labels"], **op[2]} if op[2] else {}
                entry["data"] = str(op[3])
            elif kind == "update":
                cur = api.get("ConfigMap", name)
                if op[2]:
                    cur["metadata"]["resourceVersion"] = "1"  # stale on purpose
                cur["data"] = {"v": "u"}
                out = api.update(cur)
                assert not op[2], "a stale update must conflict"
                model[name]["data"] = "u"
            elif kind == "delete":
                out = api.delete("ConfigMap", name)
                entry = model[name]
                if entry["finalizer"]:
                    entry["deleting"] = True
                else:
                    del model[name]
            else:
                entry = model.get(name)
                out = api.patch("ConfigMap", name, {"metadata": {"finalizers": None}})
                if entry is not None:
                    entry["finalizer"] = False
                    if entry["deleting"]:
                        del model[name]
        except APIError as e:
            if kind == "create":
                assert name in model and e.code == 409
            elif kind == "update" and op[2] and name in model:
                assert e.code == 409
            else:
                assert name not in model and e.code == 404
            continue
        rv = int(out["metadata"]["resourceVersion"])
        now_rv = int(api.resource_version())
        assert now_rv >= last_rv  # the cluster's resourceVersion never goes back
        if now_rv > last_rv:
            assert last_rv < rv <= now_rv  # a real write returns the version it created
        else:
            assert rv <= now_rv  # a no-op write returns the object's current version
        last_rv = now_rv

    listed = api.list("ConfigMap")["items"]
    assert [o["metadata"]["name"] for o in listed] == sorted(model)
    for o in listed:
        entry = model[o["metadata"]["name"]]
        assert o["metadata"].get("labels", {}) == entry["labels"]
        assert o["data"]["v"] == entry["data"]
        assert ("deletionTimestamp" in o["metadata"]) == entry["deleting"]
    # the watch saw every change, in order, and its view equals the list
    assert seen_rvs == sorted(seen_rvs) and len(seen_rvs) == len(set(seen_rvs))
    assert {n: o["metadata"]["resourceVersion"] for n, o in watched.items()} == {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed
    }
    # and a replay from the beginning of history gives the same final view
    replayed: dict[str, str] = {}

    def replay(etype: str, obj: dict[str, Any]) -> None:
        if etype == "DELETED":
            replayed.pop(obj["metadata"]["name"], None)
        else:
            replayed[obj["metadata"]["name"]] = obj["metadata"]["resourceVersion"]

    api.watch("ConfigMap", resource_version=4, callback=replay)  # after the 4 initial namespaces
    assert replayed == {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in listed}


REQS = st.lists(
    st.one_of(
        st.tuples(
            st.sampled_from(["app", "tier", "env"]),
            st.sampled_from(["In", "NotIn"]),
            st.lists(LABEL_VALUES, min_size=1, max_size=2),
        ),
        st.tuples(
            st.sampled_from(["app", "tier", "env"]), st.sampled_from(["Exists", "DoesNotExist"]), st.just([])
        ),
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(LABELS, min_size=1, max_size=8),
    st.dictionaries(st.sampled_from(["app", "tier"]), LABEL_VALUES, max_size=2),
    REQS,
)
def test_string_and_dict_selectors_agree(
    labelsets: list[dict[str, str]], match: dict[str, str], reqs: list[Any]
) -> None:
    api = SimAPIServer(VirtualClock())
    for i, labels in enumerate(labelsets):
        api.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"o{i}", "labels": labels}})
    exprs = [{"key": k, "operator": op, **({"values": v} if v else {})} for k, op, v in reqs]
    as_dict = {"matchLabels": match, "matchExpressions": exprs}
    parts = [f"{k}={v}" for k, v in match.items()]
    for k, op, v in reqs:
        parts.append(
            {
                "In": f"{k} in ({','.join(v)})",
                "NotIn": f"{k} notin ({','.join(v)})",
                "Exists": k,
                "DoesNotExist": f"!{k}",
            }[op]
        )
    as_string = ", ".join(parts)

    def expected(labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in match.items()):
            return False
        for k, op, v in reqs:
            ok = {
                "In": labels.get(k) in v,
                "NotIn": labels.get(k) not in v,
                "Exists": k in labels,
                "DoesNotExist": k not in labels,
            }[op]
            if not ok:
                return False
        return True

    want = [f"o{i}" for i, labels in enumerate(labelsets) if expected(labels)]
    by_dict = [o["metadata"]["name"] for o in api.list("ConfigMap", label_selector=as_dict)["items"]]
    by_string = [o["metadata"]["name"] for o in api.list("ConfigMap", label_selector=as_string)["items"]]
    assert sorted(want) == by_dict == by_string
