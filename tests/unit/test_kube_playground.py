"""Unit tests of the kube Playground with a fake HTTP layer: retries, conflicts, rate limiting,
discovery refresh, error classification and the re-list diff. No API server needed."""

from __future__ import annotations

import io
import json
import random
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import urllib3
from kubernetes.client import Configuration
from kubernetes.client.rest import RESTResponse

from actors.base import ActorError
from actors.kube import (
    ClusterConfig,
    KubeError,
    KubePlayground,
    RetryPolicy,
    TokenBucket,
    classify,
    diff_snapshots,
)

HOST = "https://kube.invalid:6443"
CORE_V1 = {
    "kind": "APIResourceList",
    "groupVersion": "v1",
    "resources": [
        {
            "name": "configmaps",
            "singularName": "configmap",
            "namespaced": True,
            "kind": "ConfigMap",
            "verbs": [],
        },
        {
            "name": "namespaces",
            "singularName": "namespace",
            "namespaced": False,
            "kind": "Namespace",
            "verbs": [],
        },
        {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod", "verbs": []},
        {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]},
    ],
}
CM_PATH = "/api/v1/namespaces/default/configmaps/a"
CM: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "ConfigMap",
    "metadata": {"name": "a", "namespace": "default", "uid": "u1"},
}

Reply = tuple[int, Any] | tuple[int, Any, dict[str, str]] | BaseException


def status(code: int, reason: str, message: str = "", name: str = "a") -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message or reason,
        "reason": reason,
        "details": {"name": name, "kind": "configmaps"},
        "code": code,
    }


class _Body(io.BytesIO):
    """A response body that reports itself closed once read to the end, as a socket would."""

    def isclosed(self) -> bool:
        return self.tell() >= len(self.getbuffer())


class FakeRest:
    """Stands in for ``RESTClientObject``: scripted replies per (method, path); the last reply of
    a script repeats."""

    def __init__(self, routes: dict[tuple[str, str], list[Reply]]) -> None:
        self.routes = {k: list(v) for k, v in routes.items()}
        self.calls: list[tuple[str, str, dict[str, list[str]], Any, dict[str, str]]] = []

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> RESTResponse:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        self.calls.append((method, parts.path, query, body, dict(headers or {})))
        # Watches are scripted apart from lists of the same path: ("GET", "<path>?watch").
        script = self.routes.get((method, parts.path + ("?watch" if "watch" in query else "")))
        if not script:
            reply: Reply = (404, "404 page not found\n")
        else:
            reply = script.pop(0) if len(script) > 1 else script[0]
        if isinstance(reply, BaseException):
            raise reply
        code, doc, *rest = reply
        hdrs = {"Content-Type": "application/json", **(rest[0] if rest else {})}
        if isinstance(doc, list):  # a watch stream: one JSON event per line
            data = b"".join(json.dumps(e).encode() + b"\n" for e in doc)
        else:
            data = doc.encode() if isinstance(doc, str) else json.dumps(doc).encode()
        return RESTResponse(
            urllib3.HTTPResponse(body=_Body(data), status=code, headers=hdrs, preload_content=False)
        )

    def close(self) -> None:
        pass

    def count(self, method: str, path: str) -> int:
        return sum(1 for c in self.calls if c[0] == method and c[1] == path)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def make(
    routes: dict[tuple[str, str], list[Reply]], *, seed: int = 7, **options: Any
) -> tuple[KubePlayground, FakeRest, FakeClock]:
    clock = FakeClock()
    cfg = ClusterConfig(configuration=Configuration(host=HOST), **options)
    pg = KubePlayground({"default": cfg}, seed=seed, sleep=clock.sleep, clock=clock.time)
    rest = FakeRest({("GET", "/api/v1"): [(200, CORE_V1)], **routes})
    pg.cluster("default").api_client.rest_client = rest  # type: ignore[assignment]
    return pg, rest, clock


@pytest.fixture
def no_global_config() -> Iterator[None]:
    before = Configuration._default
    yield
    assert Configuration._default is before, "the global kubernetes configuration must not be touched"


# ---------------------------------------------------------------------------------- retries


def test_503_twice_then_success(no_global_config: None) -> None:
    pg, rest, clock = make(
        {("GET", CM_PATH): [(503, status(503, "ServiceUnavailable")), (503, "busy"), (200, CM)]}
    )
    assert pg.get("default", "v1", "ConfigMap", "default", "a") == CM
    assert rest.count("GET", CM_PATH) == 3
    # Exponential backoff with jitter: 0.1 then 0.2 seconds, each stretched by up to 20%.
    assert len(clock.sleeps) == 2
    assert 0.1 <= clock.sleeps[0] <= 0.12
    assert 0.2 <= clock.sleeps[1] <= 0.24
    counts = pg.request_counts()
    assert counts[("default", "get", "503")] == 2
    assert counts[("default", "get", "200")] == 1
    assert counts[("default", "discovery", "200")] == 1


def test_backoff_jitter_is_seeded() -> None:
    def sleeps(seed: int) -> list[float]:
        pg, _, clock = make({("GET", CM_PATH): [(503, "x"), (503, "x"), (503, "x"), (200, CM)]}, seed=seed)
        pg.get("default", "v1", "ConfigMap", "default", "a")
        return clock.sleeps

    assert sleeps(1) == sleeps(1)
    assert sleeps(1) != sleeps(2)
    policy = RetryPolicy(initial=1.0, factor=3.0, jitter=0.0, cap=5.0)
    assert [policy.delay(n, random.Random(0)) for n in (1, 2, 3, 4)] == [1.0, 3.0, 5.0, 5.0]


def test_retries_are_bounded() -> None:
    pg, rest, clock = make({("GET", CM_PATH): [(500, status(500, "InternalError", "etcd is sad"))]})
    with pytest.raises(KubeError) as err:
        pg.get("default", "v1", "ConfigMap", "default", "a")
    assert err.value.transient
    assert err.value.code == 500
    assert "after 5 attempts" in str(err.value)
    assert "etcd is sad" in str(err.value)
    assert 'cluster "default"' in str(err.value)
    assert rest.count("GET", CM_PATH) == 5
    assert len(clock.sleeps) == 4


def test_connection_errors_are_retried() -> None:
    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    pg, _, _ = make({("GET", CM_PATH): [refused, urllib3.exceptions.ProtocolError("reset"), (200, CM)]})
    assert pg.get("default", "v1", "ConfigMap", "default", "a") == CM
    assert pg.request_counts()[("default", "get", "error")] == 2


def test_retry_after_is_honoured() -> None:
    pg, _, clock = make(
        {("GET", CM_PATH): [(429, status(429, "TooManyRequests"), {"Retry-After": "3"}), (200, CM)]}
    )
    pg.get("default", "v1", "ConfigMap", "default", "a")
    assert clock.sleeps == [3.0]


def test_conflict_is_surfaced_not_retried() -> None:
    pg, rest, clock = make(
        {("PATCH", CM_PATH): [(409, status(409, "Conflict", "the object has been modified"))]}
    )
    with pytest.raises(KubeError) as err:
        pg.patch("default", "v1", "ConfigMap", "default", "a", {"metadata": {"resourceVersion": "1"}})
    assert not err.value.transient
    assert err.value.code == 409
    assert "conflict" in str(err.value).lower()
    assert rest.count("PATCH", CM_PATH) == 1
    assert clock.sleeps == []


def test_json_patch_is_retried_only_when_surely_not_sent() -> None:
    ops = [{"op": "add", "path": "/data/x", "value": "1"}]
    pg, rest, _ = make({("PATCH", CM_PATH): [(503, "busy"), (200, CM)]})
    with pytest.raises(KubeError) as err:
        pg.patch("default", "v1", "ConfigMap", "default", "a", ops, "json")
    assert err.value.transient
    assert rest.count("PATCH", CM_PATH) == 1

    refused = urllib3.exceptions.NewConnectionError(None, "Connection refused")  # type: ignore[arg-type]
    pg, rest, _ = make({("PATCH", CM_PATH): [refused, (200, CM)]})
    assert pg.patch("default", "v1", "ConfigMap", "default", "a", ops, "json") == CM
    method, _, _, body, headers = rest.calls[-1]
    assert (method, body, headers["Content-Type"]) == ("PATCH", ops, "application/json-patch+json")


def test_patch_content_types() -> None:
    pg, rest, _ = make({("PATCH", CM_PATH): [(200, CM)]})
    pg.patch("default", "v1", "ConfigMap", "default", "a", {"data": {"x": "1"}})
    pg.patch("default", "v1", "ConfigMap", "default", "a", {"data": {"x": "1"}}, "strategic")
    types = [c[4]["Content-Type"] for c in rest.calls if c[0] == "PATCH"]
    assert types == ["application/merge-patch+json", "application/strategic-merge-patch+json"]
    with pytest.raises(ActorError, match="unsupported patch type"):
        pg.patch("default", "v1", "ConfigMap", "default", "a", {}, "apply-ish")


# ---------------------------------------------------------------------------------- semantics


def test_not_found_and_already_exists() -> None:
    pg, _, _ = make(
        {
            ("GET", CM_PATH): [(404, status(404, "NotFound")), (200, CM)],
            ("DELETE", CM_PATH): [(404, status(404, "NotFound"))],
            ("POST", "/api/v1/namespaces/default/configmaps"): [(409, status(409, "AlreadyExists"))],
        }
    )
    assert pg.get("default", "v1", "ConfigMap", None, "a") is None  # namespace defaults to "default"
    assert pg.delete("default", "v1", "ConfigMap", "default", "a") is True
    created = pg.create("default", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})
    assert created == CM


def test_cluster_scoped_kind_ignores_namespace() -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}
    pg, rest, _ = make(
        {("POST", "/api/v1/namespaces"): [(201, ns)], ("GET", "/api/v1/namespaces/x"): [(200, ns)]}
    )
    pg.create("default", {**ns, "metadata": {"name": "x", "namespace": "ignored"}})
    assert rest.calls[-1][3] == ns  # metadata.namespace stripped
    assert pg.get("default", "v1", "Namespace", "ignored", "x") == ns
    assert not pg.namespaced("default", "v1", "Namespace")
    assert pg.namespaced("default", "v1", "ConfigMap")


def test_discovery_is_refreshed_on_a_miss() -> None:
    gv = "/apis/e2e.dev/v1"
    other = {"name": "others", "namespaced": False, "kind": "Other", "verbs": []}
    thing = {"name": "things", "namespaced": True, "kind": "Thing", "verbs": []}
    before = {"kind": "APIResourceList", "groupVersion": "e2e.dev/v1", "resources": [other]}
    after = {**before, "resources": [other, thing]}  # a CRD was installed meanwhile
    obj = {"apiVersion": "e2e.dev/v1", "kind": "Thing", "metadata": {"name": "t", "namespace": "default"}}
    pg, rest, _ = make(
        {
            ("GET", gv): [(200, before), (200, after)],
            ("GET", "/apis/e2e.dev/v1/namespaces/default/things/t"): [(200, obj)],
        }
    )
    discovery = pg.cluster("default").discovery
    assert not pg.namespaced("default", "e2e.dev/v1", "Other")
    assert discovery.refreshes == 0
    assert pg.get("default", "e2e.dev/v1", "Thing", None, "t") == obj  # miss -> refresh -> found
    assert discovery.refreshes == 1
    assert rest.count("GET", gv) == 2
    pg.get("default", "e2e.dev/v1", "Thing", None, "t")
    assert rest.count("GET", gv) == 2  # cached
    assert pg.namespaced("default", "e2e.dev/v1", "Nope")  # unknown kinds count as namespaced (as in the sim)
    assert discovery.refreshes == 2


def test_unknown_cluster_and_kind() -> None:
    pg, _, _ = make({})
    with pytest.raises(ActorError, match='unknown cluster "nope"'):
        pg.get("nope", "v1", "ConfigMap", "default", "a")
    with pytest.raises(KubeError, match="does not serve kind Widget") as err:
        pg.get("default", "v1", "Widget", "default", "a")
    assert not err.value.transient


def test_delete_reports_terminating_objects() -> None:
    terminating = {**CM, "metadata": {**CM["metadata"], "finalizers": ["x/y"], "deletionTimestamp": "now"}}
    pg, _, _ = make({("DELETE", CM_PATH): [(200, terminating)], ("GET", CM_PATH): [(200, terminating)]})
    assert pg.delete("default", "v1", "ConfigMap", "default", "a") is False
    pg, _, _ = make(
        {("DELETE", CM_PATH): [(200, terminating)], ("GET", CM_PATH): [(404, status(404, "NotFound"))]}
    )
    assert pg.delete("default", "v1", "ConfigMap", "default", "a") is True


def test_in_cluster_config_outside_a_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ActorError, match='cluster "inside": cannot load in-cluster config'):
        KubePlayground({"inside": ClusterConfig.in_cluster(qps=10)})


# ---------------------------------------------------------------------------------- watches

CMS_PATH = "/api/v1/namespaces/default/configmaps"


def cm(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": rv}}


def cm_list(rv: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "ConfigMapList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": rv},
        "items": list(items),
    }


def test_watch_relists_on_410_and_delivers_the_difference() -> None:
    gone = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Expired", "code": 410}
    lists: list[Reply] = [
        (200, cm_list("10", cm("a", "1"), cm("b", "1"))),
        (200, cm_list("12", cm("a", "11"), cm("c", "12"))),  # b vanished, c appeared meanwhile
        (200, cm_list("13", cm("a", "11"), cm("c", "12"))),
    ]
    watches: list[Reply] = [
        (200, [{"type": "MODIFIED", "object": cm("a", "11")}, {"type": "ERROR", "object": gone}]),
        (410, gone),  # the same, as an HTTP status
        (200, [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "15"}}}]),
        (200, []),
    ]
    pg, rest, _ = make(
        {("GET", CMS_PATH): lists, ("GET", CMS_PATH + "?watch"): watches},
        watch_retry=RetryPolicy(initial=0.01, cap=0.02),
    )
    events: list[tuple[str, str]] = []
    sub = pg.watch(
        "default", "v1", "ConfigMap", "default", lambda t, o: events.append((t, o["metadata"]["name"]))
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and sub.watch.connects < 5:
        time.sleep(0.01)
    sub.stop()
    assert events == [("MODIFIED", "a"), ("DELETED", "b"), ("ADDED", "c")]
    assert sub.watch.relists == 2
    assert not sub.watch.running
    watch_calls = [q for m, p, q, _, _ in rest.calls if p == CMS_PATH and "watch" in q]
    assert [q["resourceVersion"] for q in watch_calls[:5]] == [["10"], ["12"], ["13"], ["15"], ["15"]]
    assert all(q["allowWatchBookmarks"] == ["true"] and q["timeoutSeconds"] == ["300"] for q in watch_calls)
    counts = pg.request_counts()
    assert counts[("default", "watch", "410")] == 1
    assert counts[("default", "list", "200")] == 3


# ---------------------------------------------------------------------------------- rate limiting


def test_token_bucket_with_fake_clock() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2.0, burst=3, clock=clock.time, sleep=clock.sleep)
    waits = [bucket.acquire() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]  # the burst
    assert waits[3:] == pytest.approx([0.5, 0.5])  # then one token every 1/qps seconds
    assert clock.now == pytest.approx(101.0)
    clock.now += 10  # idle: refills up to the burst, not beyond
    assert bucket.available() == pytest.approx(3.0)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_token_bucket_queues_concurrent_reservations() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=1, clock=clock.time, sleep=clock.sleep)
    assert [bucket.reserve() for _ in range(4)] == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert TokenBucket(qps=0, burst=0).acquire() == 0.0  # disabled


def test_playground_requests_are_rate_limited() -> None:
    pg, _, clock = make({("GET", CM_PATH): [(200, CM)]}, qps=1.0, burst=2)
    for _ in range(3):
        pg.get("default", "v1", "ConfigMap", "default", "a")
    # discovery + 3 gets = 4 requests: 2 from the burst, then 1 per second.
    assert clock.sleeps == pytest.approx([1.0, 1.0])
    assert pg.cluster("default").limiter.waits == 2


# ---------------------------------------------------------------------------------- pure helpers


def test_classify() -> None:
    from kubernetes.client.exceptions import ApiException

    def api_exc(code: int, body: Any = None, headers: dict[str, str] | None = None) -> ApiException:
        e = ApiException(status=code, reason="r", body=json.dumps(body) if body is not None else None)
        e.headers = headers
        return e

    f = classify(api_exc(409, status(409, "Conflict", "modified")))
    assert f is not None and (f.code, f.reason, f.message, f.transient) == (
        409,
        "Conflict",
        "modified",
        False,
    )
    for code in (429, 500, 502, 503, 504):
        f = classify(api_exc(code))
        assert f is not None and f.transient, code
    for code in (400, 401, 403, 404, 410, 422):
        f = classify(api_exc(code))
        assert f is not None and not f.transient, code
    f = classify(api_exc(503, headers={"Retry-After": "7"}))
    assert f is not None and f.retry_after == 7.0
    f = classify(urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"))  # type: ignore[arg-type]
    assert f is not None and f.transient and f.sent and f.code_label == "error"
    f = classify(ConnectionRefusedError())
    assert f is not None and f.transient and not f.sent
    assert classify(ValueError("a bug")) is None


def test_diff_snapshots() -> None:
    def obj(name: str, rv: str, uid: str = "") -> dict[str, Any]:
        return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "uid": uid or name}}

    old = {("ns", n): obj(n, "1") for n in ("gone", "same", "changed", "recreated")}
    new = {
        ("ns", "same"): obj("same", "1"),
        ("ns", "changed"): obj("changed", "5"),
        ("ns", "recreated"): obj("recreated", "6", uid="other"),
        ("ns", "new"): obj("new", "7"),
    }
    events = [(t, o["metadata"]["name"]) for t, o in diff_snapshots(old, new)]
    assert events == [
        ("DELETED", "gone"),
        ("DELETED", "recreated"),
        ("MODIFIED", "changed"),
        ("ADDED", "new"),
        ("ADDED", "recreated"),
    ]
    assert diff_snapshots(new, new) == []
