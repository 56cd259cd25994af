"""The e2e harness itself: a real kube-apiserver + etcd behave as the engine's e2e tests need."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

GROUP = "e2e.chaosflow.dev"
VERSION = "v1"
PLURAL = "widgets"
T = TypeVar("T")


def eventually(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Calls ``fn`` until it returns without raising (ApiException/AssertionError), within ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (ApiException, AssertionError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)


@pytest.fixture(scope="module")
def api(kube: KubeAPIServer) -> Iterator[client.ApiClient]:
    api_client = kube.api_client()
    yield api_client
    api_client.close()


@pytest.fixture
def namespace(api: client.ApiClient) -> Iterator[str]:
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    # No namespace controller runs, so the namespace stays Terminating; that is fine for tests.
    client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture(scope="module")
def widget_crd(api: client.ApiClient) -> str:
    """A namespaced CRD with a structural schema, Established before it is returned."""
    name = f"{PLURAL}.{GROUP}"
    crd: Any = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "required": ["size"],
                                    "properties": {
                                        "size": {"type": "integer", "minimum": 1},
                                        "color": {"type": "string"},
                                    },
                                },
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }
    ext = client.ApiextensionsV1Api(api)
    ext.create_custom_resource_definition(crd)

    def established() -> None:
        status = ext.read_custom_resource_definition(name).status
        conditions = (status.conditions if status else None) or []
        assert any(c.type == "Established" and c.status == "True" for c in conditions), conditions

    eventually(established)
    return name


def resource_version(obj: Any) -> str:
    """metadata.resourceVersion of a typed object or list."""
    rv = obj.metadata.resource_version if obj.metadata else None
    assert rv, obj
    return str(rv)


def create_widget(api: client.ApiClient, namespace: str, name: str, size: int = 3) -> dict[str, Any]:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, "color": "teal"},
    }
    objects = client.CustomObjectsApi(api)

    def create() -> Any:
        return objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

    # Right after Established, the REST endpoint can take a moment to be served.
    created: dict[str, Any] = eventually(create)
    return created


def test_apiserver_ready(kube: KubeAPIServer) -> None:
    assert kube.apiserver_running
    body = kube.readyz()
    assert "readyz check passed" in body
    assert kube.url.startswith("https://127.0.0.1:")
    assert kube.kubeconfig.is_file()


def test_namespace_and_configmap(api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(api)
    cm = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="settings"), data={"mode": "chaos"})
    core.create_namespaced_config_map(namespace, cm)
    got = core.read_namespaced_config_map("settings", namespace)
    assert got.data == {"mode": "chaos"}
    assert int(resource_version(got)) > 0


def test_custom_resource(api: client.ApiClient, widget_crd: str, namespace: str) -> None:
    created = create_widget(api, namespace, "w1", size=5)
    assert created["spec"] == {"size": 5, "color": "teal"}
    objects = client.CustomObjectsApi(api)
    got: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "w1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    # The structural schema is enforced.
    bad = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Widget", "metadata": {"name": "w2"}, "spec": {}}
    with pytest.raises(ApiException) as err:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, bad)
    assert err.value.status == 422


def test_kubectl_get_namespaces(kube: KubeAPIServer, namespace: str) -> None:
    out = kube.kubectl("get", "ns", "-o", "name").stdout.split()
    assert "namespace/default" in out
    assert f"namespace/{namespace}" in out
    version = json.loads(kube.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith("v1.")


def test_objects_survive_apiserver_restart(
    kube: KubeAPIServer, api: client.ApiClient, widget_crd: str, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"), data={"k": "v"})
    )
    widget_uid = create_widget(api, namespace, "kept")["metadata"]["uid"]
    port = kube.secure_port

    kube.restart_apiserver()

    assert kube.secure_port == port
    assert kube.apiserver_running
    # The client from before the restart reconnects on its own.
    assert core.read_namespaced_config_map("kept", namespace).data == {"k": "v"}
    got: Any = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "kept"
    )
    assert got["metadata"]["uid"] == widget_uid


def watch_outcome(list_call: Callable[..., Any], *args: Any, resource_version: str) -> tuple[int, str]:
    """Opens a raw watch via ``list_call(*args, watch=True, ...)`` from ``resource_version``;
    returns (code, message) of the error the API server answers with, either as an HTTP status
    or as a watch ERROR event."""
    try:
        resp: Any = list_call(
            *args, watch=True, resource_version=resource_version, timeout_seconds=10, _preload_content=False
        )
    except ApiException as exc:
        return int(exc.status), str(exc.reason)
    try:
        for raw in resp.stream(decode_content=True):
            for line in raw.splitlines():
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    return int(event["object"]["code"]), str(event["object"].get("message"))
                # Events from before the compaction must not be replayed.
                pytest.fail(f"watch from compacted resourceVersion {resource_version} got {event['type']}")
    finally:
        resp.release_conn()
    pytest.fail(f"watch from compacted resourceVersion {resource_version} ended without an error")


def test_watch_from_compacted_revision_is_gone(
    kube: KubeAPIServer, api: client.ApiClient, widget_crd: str, namespace: str
) -> None:
    core = client.CoreV1Api(api)
    objects = client.CustomObjectsApi(api)
    cm = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="c"), data={"n": "0"})
    )
    old_cm_rv = resource_version(cm)
    old_widget_rv = create_widget(api, namespace, "w")["metadata"]["resourceVersion"]
    for i in range(1, 4):
        core.patch_namespaced_config_map("c", namespace, {"data": {"n": str(i)}})
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "w", {"spec": {"size": i + 1}}
        )

    compacted = kube.compact_etcd()
    assert compacted > int(old_cm_rv)
    assert kube.etcd_revision() == compacted

    code, message = watch_outcome(core.list_namespaced_config_map, namespace, resource_version=old_cm_rv)
    assert code == 410, message
    code, message = watch_outcome(
        objects.list_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        resource_version=old_widget_rv,
    )
    assert code == 410, message

    # The client's Watch helper surfaces it as ApiException(410) (after its one retry).
    with pytest.raises(ApiException) as err:
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=old_cm_rv, timeout_seconds=10
        ):
            pass
    assert err.value.status == 410

    # Relisting gives a resourceVersion that can be watched again.
    current = resource_version(core.list_namespaced_config_map(namespace))
    core.patch_namespaced_config_map("c", namespace, {"data": {"n": "after"}})
    events = watch.Watch().stream(
        core.list_namespaced_config_map, namespace, resource_version=current, timeout_seconds=5
    )
    first = next(iter(events))
    assert first["type"] == "MODIFIED"
    assert first["object"].data == {"n": "after"}


def test_rbac_client_certificate_user(kube: KubeAPIServer, api: client.ApiClient, namespace: str) -> None:
    kubeconfig = kube.user_kubeconfig("alice", groups=["chaosflow:testers"])
    denied = kube.kubectl("get", "configmaps", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr.lower()

    # Not the aggregated "view" ClusterRole: no controller-manager fills in its rules here.
    role: Any = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "configmap-reader"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
    }
    rbac = client.RbacAuthorizationV1Api(api)
    rbac.create_namespaced_role(namespace, role)
    binding: Any = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "alice-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "configmap-reader"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
    }
    rbac.create_namespaced_role_binding(namespace, binding)

    def allowed() -> None:
        result = kube.kubectl("get", "configmaps", "-n", namespace, kubeconfig=kubeconfig, check=False)
        assert result.returncode == 0, result.stderr

    eventually(allowed, timeout=10)
    who = json.loads(kube.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert who["status"]["userInfo"]["username"] == "alice"
    assert "chaosflow:testers" in who["status"]["userInfo"]["groups"]


def test_service_account_token_user(kube: KubeAPIServer, namespace: str) -> None:
    kubeconfig = kube.service_account_kubeconfig(namespace, "robot")
    who = json.loads(kube.kubectl("auth", "whoami", "-o", "json", kubeconfig=kubeconfig).stdout)
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:robot"
    can = kube.kubectl("auth", "can-i", "create", "pods", "-n", namespace, kubeconfig=kubeconfig, check=False)
    assert can.stdout.strip() == "no"
