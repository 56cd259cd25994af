"""KubePlayground against a real kube-apiserver + etcd (see harness.py).

Watches are checked through everything that breaks them in real life: server-side timeouts, an
apiserver restart, and a network cut during which objects change and etcd is compacted (the
410 Gone path, where the re-list must deliver what was missed). The cut is made by a TCP proxy
between the playground and the API server, so the API stays usable directly meanwhile.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.server
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from actors.base import ActorError
from actors.kube import ClusterConfig, KubeError, KubePlayground, KubeWatch, RetryPolicy

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

T = TypeVar("T")
GROUP = "kubepg.chaosflow.dev"


def fast(kubeconfig: Path, **options: Any) -> ClusterConfig:
    """A cluster config with quick retries and watch backoffs, to keep the tests short."""
    return ClusterConfig(
        kubeconfig=kubeconfig,
        retry=RetryPolicy(attempts=4, initial=0.05, cap=0.5),
        watch_retry=RetryPolicy(initial=0.05, cap=0.5),
        **options,
    )


def eventually(fn: Callable[[], T], timeout: float = 15.0, interval: float = 0.05) -> T:
    """Calls ``fn`` until it returns without raising AssertionError/ActorError, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (AssertionError, ActorError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)


class Recorder:
    """A watch callback that records (type, name, object) and lets tests wait for events."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.events: list[tuple[str, str, dict[str, Any]]] = []
        self.threads: set[str] = set()

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        with self._cond:
            self.events.append((event_type, obj["metadata"]["name"], obj))
            self.threads.add(threading.current_thread().name)
            self._cond.notify_all()

    def seen(self, start: int = 0) -> list[tuple[str, str]]:
        with self._cond:
            return [(t, n) for t, n, _ in self.events[start:]]

    def mark(self) -> int:
        with self._cond:
            return len(self.events)

    def wait_for(self, *expected: tuple[str, str], start: int = 0, timeout: float = 15.0) -> None:
        """Until every expected (type, name) was seen after ``start``, in this order."""

        def done() -> bool:
            it = iter(self.seen(start))
            return all(e in it for e in expected)  # an ordered sub-sequence

        with self._cond:
            ok = self._cond.wait_for(done, timeout)
        assert ok, f"expected {expected} in order, got {self.seen(start)}"


class TCPProxy:
    """A loopback TCP forwarder to the API server that can cut every connection and refuse new
    ones until resumed: a network partition between the playground and the cluster."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._blocked = threading.Event()
        self._closed = False
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()
        threading.Thread(target=self._accept, name="tcp-proxy", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            if self._blocked.is_set():
                conn.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=5)
                upstream.settimeout(None)
            except OSError:
                conn.close()
                continue
            with self._lock:
                self._socks.update((conn, upstream))
            for src, dst in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def cut(self) -> None:
        self._blocked.set()
        with self._lock:
            socks, self._socks = self._socks, set()
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def resume(self) -> None:
        self._blocked.clear()

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def write_kubeconfig(kube: KubeAPIServer, path: Path, servers: dict[str, str], current: str) -> Path:
    """The admin kubeconfig with one context per ``servers`` entry (context name -> URL)."""
    base = yaml.safe_load(kube.kubeconfig.read_text())
    cluster, user = base["clusters"][0]["cluster"], base["users"][0]
    base["clusters"] = [{"name": n, "cluster": {**cluster, "server": url}} for n, url in servers.items()]
    base["contexts"] = [{"name": n, "context": {"cluster": n, "user": user["name"]}} for n in servers]
    base["current-context"] = current
    path.write_text(yaml.safe_dump(base))
    return path


def configmap(
    name: str,
    namespace: str,
    data: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    if finalizers:
        meta["finalizers"] = finalizers
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        obj["data"] = data
    return obj


def crd(plural: str, kind: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}", "namespace": "ignored-for-cluster-scoped"},
        "spec": {
            "group": GROUP,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }


def install_crd(pg: KubePlayground, plural: str, kind: str, scope: str) -> None:
    created = pg.create("default", crd(plural, kind, scope))
    assert "namespace" not in created["metadata"]  # CRDs are cluster-scoped: namespace stripped

    def established() -> None:
        got = pg.get(
            "default", "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, f"{plural}.{GROUP}"
        )
        conditions = ((got or {}).get("status") or {}).get("conditions") or []
        assert any(c["type"] == "Established" and c["status"] == "True" for c in conditions), conditions

    eventually(established)


@pytest.fixture(scope="module")
def pg(kube: KubeAPIServer) -> Iterator[KubePlayground]:
    playground = KubePlayground({"default": fast(kube.kubeconfig)})
    yield playground
    playground.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("kube-watch")], "leaked watch threads"


@pytest.fixture
def ns(pg: KubePlayground) -> Iterator[str]:
    name = f"kpg-{uuid.uuid4().hex[:8]}"
    pg.create("default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    pg.delete("default", "v1", "Namespace", None, name)  # stays Terminating: no namespace controller


@pytest.fixture
def proxy(kube: KubeAPIServer) -> Iterator[TCPProxy]:
    p = TCPProxy(kube.secure_port)
    yield p
    p.close()


# ---------------------------------------------------------------------------------- objects


def test_configmap_crud(pg: KubePlayground, ns: str) -> None:
    created = pg.create("default", configmap("settings", ns, data={"mode": "chaos"}))
    assert created["metadata"]["namespace"] == ns and created["data"] == {"mode": "chaos"}
    # Idempotent: the existing object comes back, unchanged.
    again = pg.create("default", configmap("settings", ns, data={"mode": "other"}))
    assert again["metadata"]["uid"] == created["metadata"]["uid"]
    assert again["data"] == {"mode": "chaos"}

    got = pg.get("default", "v1", "ConfigMap", ns, "settings")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert pg.get("default", "v1", "ConfigMap", ns, "missing") is None

    pg.create("default", configmap("labelled", ns, labels={"app": "x"}))
    names = sorted(o["metadata"]["name"] for o in pg.list("default", "v1", "ConfigMap", ns))
    assert names == ["labelled", "settings"]
    labelled = pg.list("default", "v1", "ConfigMap", ns, label_selector="app=x")
    assert [(o["kind"], o["apiVersion"], o["metadata"]["name"]) for o in labelled] == [
        ("ConfigMap", "v1", "labelled")
    ]

    merged = pg.patch("default", "v1", "ConfigMap", ns, "settings", {"data": {"level": "3"}})
    assert merged["data"] == {"mode": "chaos", "level": "3"}
    ops = [{"op": "replace", "path": "/data/mode", "value": "calm"}, {"op": "remove", "path": "/data/level"}]
    jsoned = pg.patch("default", "v1", "ConfigMap", ns, "settings", ops, patch_type="json")
    assert jsoned["data"] == {"mode": "calm"}

    # A stale resourceVersion precondition is a 409 Conflict: surfaced, not retried.
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}, "data": {"mode": "x"}}
    before = pg.request_counts().get(("default", "patch", "409"), 0)
    with pytest.raises(KubeError) as err:
        pg.patch("default", "v1", "ConfigMap", ns, "settings", stale)
    assert err.value.code == 409 and not err.value.transient
    assert pg.request_counts()[("default", "patch", "409")] == before + 1

    with pytest.raises(KubeError) as missing:
        pg.patch("default", "v1", "ConfigMap", ns, "missing", {"data": {}})
    assert missing.value.code == 404 and not missing.value.transient

    assert pg.delete("default", "v1", "ConfigMap", ns, "settings") is True
    assert pg.get("default", "v1", "ConfigMap", ns, "settings") is None
    assert pg.delete("default", "v1", "ConfigMap", ns, "settings") is True  # NotFound counts as gone


def test_delete_waits_for_finalizers(pg: KubePlayground, ns: str) -> None:
    pg.create("default", configmap("held", ns, finalizers=["chaosflow.dev/hold"]))
    assert pg.delete("default", "v1", "ConfigMap", ns, "held") is False
    assert pg.delete("default", "v1", "ConfigMap", ns, "held") is False  # still terminating
    held = pg.get("default", "v1", "ConfigMap", ns, "held")
    assert held is not None and held["metadata"].get("deletionTimestamp")
    pg.patch("default", "v1", "ConfigMap", ns, "held", {"metadata": {"finalizers": None}})
    assert pg.delete("default", "v1", "ConfigMap", ns, "held") is True
    assert pg.get("default", "v1", "ConfigMap", ns, "held") is None


class _FakeKubelet(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[0] != "containerLogs" or len(parts) != 4:
            self.send_error(404)
            return
        body = f"hello from {parts[1]}/{parts[2]}/{parts[3]}\nexit 0\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def fake_kubelet(tmp_path: Path) -> Iterator[int]:
    """An HTTPS server answering the kubelet's /containerLogs API (the API server proxies pod logs
    to the node's kubelet; without --kubelet-certificate-authority it does not verify it)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fake-kubelet")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    (tmp_path / "kubelet.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "kubelet.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tmp_path / "kubelet.crt", tmp_path / "kubelet.key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeKubelet)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield int(server.server_address[1])
    server.shutdown()
    server.server_close()


def test_pod_crud_and_logs(pg: KubePlayground, ns: str, fake_kubelet: int) -> None:
    node_name = f"node-{ns}"
    pg.create(
        "default",
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node_name},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": fake_kubelet}},
            },
        },
    )
    container = {"name": "main", "image": "busybox", "command": ["true"]}
    pending = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "pending", "namespace": ns},
        "spec": {"containers": [container]},
    }
    created = pg.create("default", pending)
    assert created["status"]["phase"] == "Pending"
    assert pg.create("default", pending)["metadata"]["uid"] == created["metadata"]["uid"]
    patched = pg.patch(
        "default", "v1", "Pod", ns, "pending", {"metadata": {"labels": {"step": "2"}}}, "strategic"
    )
    assert patched["metadata"]["labels"] == {"step": "2"}
    assert [p["metadata"]["name"] for p in pg.list("default", "v1", "Pod", ns, "step=2")] == ["pending"]
    assert pg.delete("default", "v1", "Pod", ns, "pending") is True  # never scheduled: deleted at once

    task = {
        **pending,
        "metadata": {"name": "task", "namespace": ns},
        "spec": {"nodeName": node_name, "containers": [container]},
    }
    pg.create("default", task)
    assert pg.logs("default", ns, "task") == f"hello from {ns}/task/main\nexit 0\n"
    # Bound to a node, a pod terminates gracefully: the kubelet (absent here) would confirm.
    assert pg.delete("default", "v1", "Pod", ns, "task") is False
    with pytest.raises(KubeError) as err:
        pg.logs("default", ns, "no-such-pod")
    assert err.value.code == 404


def test_custom_resource_installed_during_the_test(pg: KubePlayground, ns: str) -> None:
    api_version = f"{GROUP}/v1"
    # Unknown before its CRD exists (and discovery has cached the group's absence by then).
    with pytest.raises(KubeError, match="does not serve kind Gizmo") as err:
        pg.get("default", api_version, "Gizmo", ns, "g")
    assert not err.value.transient
    assert pg.namespaced("default", api_version, "Gizmo")  # unknown: as in the sim
    fetches = pg.cluster("default").discovery.fetches

    install_crd(pg, "gizmos", "Gizmo", "Namespaced")
    gizmo = {
        "apiVersion": api_version,
        "kind": "Gizmo",
        "metadata": {"name": "g", "namespace": ns},
        "spec": {"n": 1},
    }
    # Right after Established the endpoint can take a moment: poll, each try refreshes discovery.
    created = eventually(lambda: pg.create("default", gizmo))
    assert pg.cluster("default").discovery.fetches > fetches
    assert pg.namespaced("default", api_version, "Gizmo")
    assert pg.create("default", {**gizmo, "spec": {"n": 9}})["spec"] == {"n": 1}
    got = pg.get("default", api_version, "Gizmo", ns, "g")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert [o["metadata"]["name"] for o in pg.list("default", api_version, "Gizmo", ns)] == ["g"]
    assert pg.patch("default", api_version, "Gizmo", ns, "g", {"spec": {"color": "red"}})["spec"] == {
        "n": 1,
        "color": "red",
    }
    ops = [{"op": "replace", "path": "/spec/n", "value": 2}]
    assert pg.patch("default", api_version, "Gizmo", ns, "g", ops, "json")["spec"]["n"] == 2
    # Custom resources have no strategic merge: it falls back to a merge patch (as in the sim).
    assert (
        pg.patch("default", api_version, "Gizmo", ns, "g", {"spec": {"n": 3}}, "strategic")["spec"]["n"] == 3
    )
    assert pg.delete("default", api_version, "Gizmo", ns, "g") is True
    assert pg.get("default", api_version, "Gizmo", ns, "g") is None


def test_cluster_scoped_kinds(pg: KubePlayground) -> None:
    api_version = f"{GROUP}/v1"
    install_crd(pg, "gadgets", "Gadget", "Cluster")
    assert not pg.namespaced("default", api_version, "Gadget")
    assert not pg.namespaced("default", "v1", "Namespace")
    gadget = {
        "apiVersion": api_version,
        "kind": "Gadget",
        "metadata": {"name": "gd", "namespace": "somewhere"},
    }
    created = eventually(lambda: pg.create("default", gadget))
    assert "namespace" not in created["metadata"]
    got = pg.get("default", api_version, "Gadget", "any-namespace-is-ignored", "gd")
    assert got is not None and got["metadata"]["uid"] == created["metadata"]["uid"]
    assert "gd" in [o["metadata"]["name"] for o in pg.list("default", api_version, "Gadget", "ignored")]
    patched = pg.patch(
        "default", api_version, "Gadget", "ignored", "gd", {"metadata": {"labels": {"a": "b"}}}
    )
    assert patched["metadata"]["labels"] == {"a": "b"}
    assert pg.delete("default", api_version, "Gadget", "ignored", "gd") is True

    name = f"kpg-scoped-{uuid.uuid4().hex[:6]}"
    ns_obj = pg.create(
        "default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "namespace": "x"}}
    )
    assert ns_obj["status"]["phase"] == "Active"
    # The namespace controller does not run here, so the namespace stays Terminating.
    assert pg.delete("default", "v1", "Namespace", "x", name) is False
    terminating = pg.get("default", "v1", "Namespace", None, name)
    assert terminating is not None and terminating["status"]["phase"] == "Terminating"


# ---------------------------------------------------------------------------------- watches


def test_watch_delivers_changes_from_a_thread(pg: KubePlayground, ns: str) -> None:
    pg.create("default", configmap("old", ns))
    rec, other = Recorder(), Recorder()
    sub = pg.watch("default", "v1", "ConfigMap", ns, rec)
    sub2 = pg.watch("default", "v1", "ConfigMap", ns, other)
    assert sub.watch is sub2.watch  # one thread per (cluster, apiVersion, kind, namespace)

    pg.create("default", configmap("cm", ns, data={"v": "1"}))
    pg.patch("default", "v1", "ConfigMap", ns, "cm", {"data": {"v": "2"}})
    pg.delete("default", "v1", "ConfigMap", ns, "cm")
    rec.wait_for(("ADDED", "cm"), ("MODIFIED", "cm"), ("DELETED", "cm"))
    other.wait_for(("ADDED", "cm"), ("MODIFIED", "cm"), ("DELETED", "cm"))
    assert ("ADDED", "old") not in rec.seen()  # objects that existed before are not announced
    modified = next(o for t, n, o in rec.events if t == "MODIFIED")
    assert modified["data"] == {"v": "2"} and modified["kind"] == "ConfigMap"
    # Callbacks run on the watch thread, not on the caller's.
    assert len(rec.threads) == 1 and next(iter(rec.threads)).startswith("kube-watch-default-v1-ConfigMap")

    sub2.stop()
    assert sub.watch.running  # the other subscriber keeps it alive
    started = time.monotonic()
    sub.stop()
    assert not sub.watch.running
    assert time.monotonic() - started < 2.0  # promptly, even while blocked reading the stream
    assert sub.watch not in pg.active_watches()  # and its thread is gone: no callback can come


def test_watch_cluster_scoped_kind_ignores_namespace(pg: KubePlayground) -> None:
    rec = Recorder()
    sub = pg.watch("default", "v1", "Namespace", "ignored", rec)
    try:
        assert sub.watch.namespace is None
        name = f"kpg-watched-{uuid.uuid4().hex[:6]}"
        pg.create("default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        rec.wait_for(("ADDED", name))
    finally:
        sub.stop()


def test_watch_resumes_after_server_side_timeouts(kube: KubeAPIServer, ns: str) -> None:
    cfg = fast(kube.kubeconfig, watch_timeout_seconds=1)
    with KubePlayground({"default": cfg}) as short:
        rec = Recorder()
        sub = short.watch("default", "v1", "ConfigMap", ns, rec)
        w: KubeWatch = sub.watch
        eventually(lambda: _assert(w.connects >= 3), timeout=10)  # the server ended 2 watches
        short.create("default", configmap("late", ns))
        rec.wait_for(("ADDED", "late"))
        assert w.relists == 0  # resumed from the last resourceVersion each time
        assert w.errors == 0


def _assert(condition: bool) -> None:
    assert condition


def test_watch_survives_apiserver_restart(kube: KubeAPIServer, pg: KubePlayground, ns: str) -> None:
    # The API server's graceful shutdown waits for open watches to end (the harness kills it
    # after 10s): a short server-side watch timeout keeps the restart quick.
    cfg = fast(kube.kubeconfig, watch_timeout_seconds=1)
    with KubePlayground({"default": cfg}) as watcher:
        rec = Recorder()
        sub = watcher.watch("default", "v1", "ConfigMap", ns, rec)
        pg.create("default", configmap("before", ns))
        rec.wait_for(("ADDED", "before"))
        w = sub.watch
        connects = w.connects

        kube.restart_apiserver()

        pg.patch("default", "v1", "ConfigMap", ns, "before", {"data": {"k": "v"}})
        pg.create("default", configmap("after", ns))
        rec.wait_for(("MODIFIED", "before"), ("ADDED", "after"))
        assert w.errors >= 1  # it did notice the API server was gone
        assert w.connects > connects
        assert rec.seen().count(("ADDED", "before")) == 1  # no duplicates after resuming


def test_relist_after_compaction_delivers_missed_changes(
    kube: KubeAPIServer, pg: KubePlayground, proxy: TCPProxy, ns: str, tmp_path: Path
) -> None:
    kubeconfig = write_kubeconfig(
        kube, tmp_path / "proxied", {"proxied": f"https://127.0.0.1:{proxy.port}"}, "proxied"
    )
    for name in ("keep", "vanish", "change"):
        pg.create("default", configmap(name, ns, data={"v": "0"}))
    with KubePlayground({"default": fast(kubeconfig)}) as remote:
        rec = Recorder()
        sub = remote.watch("default", "v1", "ConfigMap", ns, rec)
        w = sub.watch
        assert w.known == 3
        pg.patch("default", "v1", "ConfigMap", ns, "keep", {"data": {"v": "1"}})
        rec.wait_for(("MODIFIED", "keep"))
        mark = rec.mark()

        proxy.cut()  # the watch is disconnected; it cannot reconnect until resume()
        try:
            # Changes it cannot see, made directly; then etcd forgets the history in between.
            assert pg.delete("default", "v1", "ConfigMap", ns, "vanish") is True
            pg.patch("default", "v1", "ConfigMap", ns, "change", {"data": {"v": "2"}})
            pg.create("default", configmap("new", ns, data={"v": "3"}))
            kube.compact_etcd()
            eventually(lambda: _assert(w.errors >= 1), timeout=10)
            # Meanwhile requests through the cut fail as transient errors, after bounded retries.
            with pytest.raises(KubeError) as err:
                remote.get("default", "v1", "ConfigMap", ns, "keep")
            assert err.value.transient and err.value.code is None
            assert "after 4 attempts" in str(err.value)
        finally:
            proxy.resume()

        # Resuming from the old resourceVersion gets 410 Gone: the re-list fills the gap.
        rec.wait_for(("DELETED", "vanish"), ("MODIFIED", "change"), ("ADDED", "new"), start=mark)
        assert sorted(rec.seen(mark)) == [("ADDED", "new"), ("DELETED", "vanish"), ("MODIFIED", "change")]
        assert w.relists >= 1
        by_name = {n: o for _, n, o in rec.events[mark:]}
        assert by_name["change"]["data"] == {"v": "2"}
        assert by_name["vanish"]["data"] == {"v": "0"}  # the last state it knew

        # And it watches on from the re-list's resourceVersion.
        pg.patch("default", "v1", "ConfigMap", ns, "new", {"data": {"v": "4"}})
        rec.wait_for(("MODIFIED", "new"), start=mark)


# ---------------------------------------------------------------------------------- clusters


def test_two_named_clusters(kube: KubeAPIServer, proxy: TCPProxy, ns: str, tmp_path: Path) -> None:
    servers = {"direct": kube.url, "via-proxy": f"https://127.0.0.1:{proxy.port}"}
    kubeconfig = write_kubeconfig(kube, tmp_path / "two", servers, current="direct")
    clusters = {
        "default": fast(kubeconfig, context=None),  # current context
        "parent": fast(kubeconfig, context="via-proxy", qps=5, burst=2),
    }
    with KubePlayground(clusters) as two:
        assert two.clusters() == ["default", "parent"]
        assert two.cluster("default").host == kube.url
        assert two.cluster("parent").host == f"https://127.0.0.1:{proxy.port}"
        assert two.cluster("default").api_client is not two.cluster("parent").api_client
        rec = Recorder()
        sub = two.watch("parent", "v1", "ConfigMap", ns, rec)
        two.create("default", configmap("shared", ns, data={"from": "default"}))
        got = two.get("parent", "v1", "ConfigMap", ns, "shared")  # the same API server behind both
        assert got is not None and got["data"] == {"from": "default"}
        rec.wait_for(("ADDED", "shared"))
        for _ in range(3):
            two.get("parent", "v1", "ConfigMap", ns, "shared")
        assert two.cluster("parent").limiter.waits >= 1  # qps=5 burst=2 throttled these
        assert two.cluster("default").limiter.waits == 0
        counts = two.request_counts()
        assert counts[("default", "create", "201")] == 1
        assert counts[("parent", "get", "200")] == 4
        assert counts[("parent", "watch", "200")] >= 1
        assert ("default", "watch", "200") not in counts
        sub.stop()
    with pytest.raises(ActorError, match='cluster "x": cannot load kubeconfig'):
        KubePlayground({"x": ClusterConfig(kubeconfig=kubeconfig, context="no-such-context")})


def test_engine_watch_trigger_over_kube(pg: KubePlayground, ns: str) -> None:
    """The engine's ObjectWatchTrigger works unchanged on the kube Playground."""
    from engine.phases import Event, EventType
    from triggers.watch import ObjectWatchTrigger

    got: list[Event] = []
    cond = threading.Condition()

    def notify(ev: Event) -> None:
        with cond:
            got.append(ev)
            cond.notify_all()

    trigger = ObjectWatchTrigger(pg, notify)
    try:
        trigger.observe("wf", "node-1", "default", "v1", "ConfigMap", ns, "observed")
        pg.create("default", configmap("observed", ns, data={"v": "1"}))
        pg.delete("default", "v1", "ConfigMap", ns, "observed")
        with cond:
            ok = cond.wait_for(lambda: len(got) >= 3 and got[-1].payload is None, timeout=15)
        assert ok, got
        assert all(e.type is EventType.NODE_OBJECT_CHANGED and e.key() == ("wf", "node-1") for e in got)
        assert got[0].payload is None  # the current state at registration: absent
        assert got[1].payload["data"] == {"v": "1"}
    finally:
        trigger.close()
