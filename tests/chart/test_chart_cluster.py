"""charts/chaosflow against the e2e harness's real kube-apiserver (v1.37.2):

- kubeconform (strict) validates `helm template` output offline, against JSON schemas generated
  from this API server's /openapi/v2 and from the CRDs (ours, and the minimal prometheus-operator
  stand-ins in tests/chart/fixtures: the real ServiceMonitor/PrometheusRule CRDs are not available
  offline, so those two kinds are validated against the fixtures' structural schemas only);
- the rendered manifests are applied (server-side) and every one is accepted;
- least privilege: the rendered ClusterRole/Roles, bound to the chart's ServiceAccount, allow what
  the controller does and nothing it must not (`kubectl auth can-i --as=system:serviceaccount:...`).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from tests.chart import schemas
from tests.chart.conftest import ALL_VALUES, CHART, FIXTURES, Helm

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

NAMESPACE = "chaosflow-system"
SA = f"system:serviceaccount:{NAMESPACE}:chaosflow"
SA_ALL = f"system:serviceaccount:{NAMESPACE}:chaosflow-controller"  # ci/all-values.yaml
FIXTURE_CRDS = sorted(FIXTURES.glob("*.yaml"))
CHART_CRDS = sorted((CHART / "crds").glob("*.yaml"))


@pytest.fixture(scope="session")
def schema_dir(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kubeconform schemas: Kubernetes kinds from the API server's OpenAPI, CRDs from files."""
    out = tmp_path_factory.mktemp("kubeconform-schemas")
    openapi = json.loads(kube.kubectl("get", "--raw", "/openapi/v2", timeout=120).stdout)
    assert schemas.openapi_v2_to_kubeconform(openapi, out) > 100
    assert schemas.crd_files_to_kubeconform([*CHART_CRDS, *FIXTURE_CRDS], out) >= 4
    return out


def kubeconform(chart_tools: Path, schema_dir: Path, manifests: str) -> dict[str, Any]:
    result = subprocess.run(
        [
            str(chart_tools / "kubeconform"),
            "-strict",
            "-summary",
            "-verbose",
            "-output=json",
            f"-schema-location={schema_dir}/{schemas.SCHEMA_LOCATION}",
            "-",
        ],
        input=manifests,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = json.loads(result.stdout)
    bad = [r for r in report["resources"] if r["status"] != "statusValid"]
    assert result.returncode == 0 and not bad, json.dumps(bad, indent=1) + result.stderr
    return report


VARIANTS = {
    "defaults": ([], []),
    "all-values": ([ALL_VALUES], []),
    "all-options-on": (
        [],
        ["serviceMonitor.enabled=true", "prometheusRule.enabled=true", "podDisruptionBudget.enabled=true"],
    ),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_kubeconform_strict(helm: Helm, chart_tools: Path, schema_dir: Path, variant: str) -> None:
    files, sets = VARIANTS[variant]
    rendered = helm.template(*files, set_values=sets, include_crds=True).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    report = kubeconform(chart_tools, schema_dir, rendered)
    assert report["summary"]["valid"] == len(docs), report["summary"]
    kinds = {d["kind"] for d in docs}
    assert {"CustomResourceDefinition", "Deployment", "ServiceAccount", "Service", "ConfigMap"} <= kinds


def test_kubeconform_rejects_what_the_api_server_would(chart_tools: Path, schema_dir: Path) -> None:
    """The schemas are strict: an unknown field or a wrong type fails (so a pass means something)."""
    bad: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"portz": []}},
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PrometheusRule",
            "metadata": {"name": "x"},
            "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "fro": "5m"}]}]},
        },
        {"apiVersion": "chaosflow.io/v1alpha1", "kind": "Workflow", "metadata": {"name": "x"}, "spec": 3},
    ]
    for doc in bad:
        result = subprocess.run(
            [
                str(chart_tools / "kubeconform"),
                "-strict",
                f"-schema-location={schema_dir}/{schemas.SCHEMA_LOCATION}",
                "-",
            ],
            input=yaml.safe_dump(doc),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 1, (doc["kind"], result.stdout, result.stderr)


def test_examples_match_the_crd_schemas(chart_tools: Path, schema_dir: Path) -> None:
    """The bundled examples (Workflow, CronWorkflow) validate against the schemas derived from
    charts/chaosflow/crds (examples/chaos-mesh holds Chaos Mesh's own Workflows: not ours)."""
    files = sorted((CHART.parents[1] / "examples").glob("*.yaml"))
    docs = [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]
    assert {d["apiVersion"] for d in docs} == {"chaosflow.io/v1alpha1"}
    report = kubeconform(chart_tools, schema_dir, "\n---\n".join(yaml.safe_dump(d) for d in docs))
    assert report["summary"]["valid"] == len(docs)


# --- apply -----------------------------------------------------------------------------------------
def ensure_namespaces(kube: KubeAPIServer, *names: str) -> None:
    items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}} for n in names]
    kube.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
    )


@pytest.fixture(scope="session")
def crds_installed(kube: KubeAPIServer) -> None:
    """Our CRDs and the prometheus-operator stand-ins, established."""
    for f in [*CHART_CRDS, *FIXTURE_CRDS]:
        kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(f))
    names = [
        doc["metadata"]["name"]
        for f in [*CHART_CRDS, *FIXTURE_CRDS]
        for doc in yaml.safe_load_all(f.read_text())
        if doc
    ]
    kube.kubectl("wait", "--for=condition=Established", "--timeout=60s", *[f"crd/{n}" for n in names])


def apply(kube: KubeAPIServer, manifests: str) -> list[str]:
    out = kube.kubectl(
        "apply", "--server-side", "--field-manager=chart-test", "-f", "-", input=manifests, timeout=120
    ).stdout
    return [line for line in out.splitlines() if line.strip()]


@pytest.fixture(scope="session")
def installed_defaults(kube: KubeAPIServer, helm: Helm, crds_installed: None) -> list[dict[str, Any]]:
    ensure_namespaces(kube, NAMESPACE)
    rendered = helm.template(
        set_values=[
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "podDisruptionBudget.enabled=true",
        ]
    ).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    lines = apply(kube, rendered)
    assert len(lines) == len(docs), lines
    return docs


@pytest.fixture(scope="session")
def installed_all_values(kube: KubeAPIServer, helm: Helm, crds_installed: None) -> list[dict[str, Any]]:
    ensure_namespaces(kube, NAMESPACE, "chaos-a", "chaos-b", "monitoring")
    rendered = helm.template(ALL_VALUES).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    lines = apply(kube, rendered)
    assert len(lines) == len(docs), lines
    return docs


def test_apply_defaults(kube: KubeAPIServer, installed_defaults: list[dict[str, Any]]) -> None:
    for doc in installed_defaults:
        m = doc["metadata"]
        ns = ["-n", m.get("namespace", NAMESPACE)]
        got = json.loads(
            kube.kubectl("get", doc["kind"].lower() + "." + _group(doc), m["name"], *ns, "-o", "json").stdout
        )
        assert got["metadata"]["uid"], doc["kind"]
    dep = json.loads(kube.kubectl("get", "deployment", "chaosflow", "-n", NAMESPACE, "-o", "json").stdout)
    assert (
        dep["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    )


def test_apply_all_values(kube: KubeAPIServer, installed_all_values: list[dict[str, Any]]) -> None:
    kinds = {d["kind"] for d in installed_all_values}
    assert {"ServiceMonitor", "PrometheusRule", "PodDisruptionBudget", "Role", "RoleBinding"} <= kinds
    rule = json.loads(
        kube.kubectl("get", "prometheusrule", "chaosflow-all", "-n", "monitoring", "-o", "json").stdout
    )
    assert rule["spec"]["groups"]


def test_pod_security_restricted_admits_the_pod(
    kube: KubeAPIServer, helm: Helm, crds_installed: None
) -> None:
    """The built-in PodSecurity admission, `restricted` level enforced on the namespace, accepts the
    controller's pod (server-side dry run of the Pod the Deployment would create)."""
    ns = "chaosflow-restricted"
    kube.kubectl(
        "apply",
        "--server-side",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}},
            }
        ),
    )
    docs = helm.render(namespace=ns)
    dep = next(d for d in docs if d["kind"] == "Deployment")
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")
    apply(kube, yaml.safe_dump(sa))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "chaosflow-restricted-check", "namespace": ns},
        "spec": dep["spec"]["template"]["spec"],
    }
    result = kube.kubectl("apply", "--dry-run=server", "-f", "-", input=json.dumps(pod), check=False)
    assert result.returncode == 0 and "Warning" not in result.stderr, result.stderr


def test_helm_install_upgrade_uninstall(kube: KubeAPIServer, helm: Helm, crds_installed: None) -> None:
    """The real `helm install` path (release Secret, CRDs already there, NOTES), then upgrade
    and uninstall, against the e2e API server."""
    ns, release = "chaosflow-helm", "cf-helm"
    kc = f"--kubeconfig={kube.kubeconfig}"
    out = helm.run("install", release, str(CHART), "-n", ns, "--create-namespace", kc).stdout
    assert "STATUS: deployed" in out and "Lease chaosflow-helm/chaosflow-controller" in out, out
    dep = json.loads(kube.kubectl("get", "deployment", f"{release}-chaosflow", "-n", ns, "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 2
    helm.run("upgrade", release, str(CHART), "-n", ns, kc, "--set", "replicas=3", "--set", "rbac.tasks=false")
    dep = json.loads(kube.kubectl("get", "deployment", f"{release}-chaosflow", "-n", ns, "-o", "json").stdout)
    assert dep["spec"]["replicas"] == 3
    role = json.loads(kube.kubectl("get", "clusterrole", f"{release}-chaosflow", "-o", "json").stdout)
    assert "pods" not in {r for rule in role["rules"] for r in rule["resources"]}
    helm.run("uninstall", release, "-n", ns, kc)
    gone = kube.kubectl("get", "clusterrole", f"{release}-chaosflow", check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    # CRDs are kept by Helm (crds/ is install-only).
    kube.kubectl("get", "crd", "workflows.chaosflow.io")


def _group(doc: dict[str, Any]) -> str:
    api = doc["apiVersion"]
    return api.split("/")[0] if "/" in api else ""


# --- least privilege -------------------------------------------------------------------------------
def can_i(
    kube: KubeAPIServer, who: str, verb: str, resource: str, namespace: str | None, *extra: str
) -> bool:
    args = ["auth", "can-i", verb, resource, f"--as={who}", *extra]
    args += ["-n", namespace] if namespace else []
    result = kube.kubectl(*args, check=False)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


ALLOWED = [
    ("get", "workflows.chaosflow.io", "team-x"),
    ("list", "workflows.chaosflow.io", "team-x"),
    ("watch", "workflows.chaosflow.io", None),
    ("patch", "workflows.chaosflow.io", "team-x"),
    ("update", "workflows.chaosflow.io", "team-x", "--subresource=status"),
    ("patch", "workflows.chaosflow.io", "team-x", "--subresource=status"),
    ("create", "workflows.chaosflow.io", "team-x"),  # CronWorkflow children
    ("delete", "workflows.chaosflow.io", "team-x"),  # beyond the history limits
    ("get", "cronworkflows.chaosflow.io", "team-x"),
    ("list", "cronworkflows.chaosflow.io", "team-x"),
    ("watch", "cronworkflows.chaosflow.io", None),
    ("update", "cronworkflows.chaosflow.io", "team-x", "--subresource=status"),
    ("patch", "cronworkflows.chaosflow.io", "team-x", "--subresource=status"),
    ("create", "events", "team-x"),
    ("get", "leases.coordination.k8s.io/chaosflow-controller", NAMESPACE),
    ("update", "leases.coordination.k8s.io/chaosflow-controller", NAMESPACE),
    ("create", "leases.coordination.k8s.io", NAMESPACE),
    ("create", "podchaos.chaos-mesh.org", "team-x"),
    ("delete", "podchaos.chaos-mesh.org", "team-x"),
    ("watch", "networkchaos.chaos-mesh.org", "team-x"),
    ("create", "pods", "team-x"),
    ("get", "pods", "team-x", "--subresource=log"),
    ("create", "configmaps", "team-x"),
]
DENIED = [
    ("delete", "nodes", None),
    ("get", "secrets", "team-x"),
    ("list", "secrets", NAMESPACE),
    ("update", "workflows.chaosflow.io", "team-x"),
    ("deletecollection", "workflows.chaosflow.io", "team-x"),
    ("patch", "cronworkflows.chaosflow.io", "team-x"),
    ("create", "cronworkflows.chaosflow.io", "team-x"),
    ("delete", "cronworkflows.chaosflow.io", "team-x"),
    ("update", "cronworkflows.chaosflow.io", "team-x", "--subresource=finalizers"),
    ("get", "leases.coordination.k8s.io", "team-x"),
    ("update", "leases.coordination.k8s.io/kube-scheduler", NAMESPACE),
    ("delete", "leases.coordination.k8s.io/chaosflow-controller", NAMESPACE),
    ("create", "pods", "team-x", "--subresource=exec"),
    ("update", "pods", "team-x"),
    ("update", "configmaps", "team-x"),
    ("create", "deployments.apps", "team-x"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", None),
    ("escalate", "clusterroles.rbac.authorization.k8s.io", None),
    ("impersonate", "users", None),
    ("create", "customresourcedefinitions.apiextensions.k8s.io", None),
    ("*", "*", "team-x"),
]


def _id(case: tuple[str | None, ...]) -> str:
    return " ".join(c for c in case if c)


@pytest.fixture(scope="session")
def team_namespace(kube: KubeAPIServer) -> str:
    ensure_namespaces(kube, "team-x")
    return "team-x"


def test_the_service_account_does_its_job(
    kube: KubeAPIServer, installed_defaults: Any, team_namespace: str
) -> None:
    """Not only can-i: with its own token, the ServiceAccount runs what the controller runs."""
    cfg = kube.service_account_kubeconfig(NAMESPACE, "chaosflow")

    def as_sa(*args: str, input: str | None = None, check: bool = True) -> Any:
        return kube.kubectl(*args, kubeconfig=cfg, input=input, check=check)

    as_sa("get", "workflows.chaosflow.io", "--all-namespaces")
    chaos = {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": "PodChaos",
        "metadata": {"name": "sa-check", "namespace": team_namespace},
        "spec": {"action": "pod-kill", "mode": "one"},
    }
    as_sa("create", "-f", "-", input=json.dumps(chaos))
    as_sa("get", "podchaos.chaos-mesh.org", "sa-check", "-n", team_namespace)
    as_sa("delete", "podchaos.chaos-mesh.org", "sa-check", "-n", team_namespace, "--wait=false")
    lease: dict[str, Any] = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "chaosflow-controller", "namespace": NAMESPACE},
        "spec": {"holderIdentity": "sa-check", "leaseDurationSeconds": 15},
    }
    as_sa("create", "-f", "-", input=json.dumps(lease))
    lease["spec"]["holderIdentity"] = "sa-check-2"
    as_sa("replace", "-f", "-", input=json.dumps(lease))
    denied = as_sa("get", "secrets", "-n", NAMESPACE, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    denied = as_sa("delete", "lease", "chaosflow-controller", "-n", NAMESPACE, check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr


@pytest.mark.parametrize("case", ALLOWED, ids=_id)
def test_controller_can(
    kube: KubeAPIServer, installed_defaults: Any, team_namespace: str, case: tuple[Any, ...]
) -> None:
    verb, resource, ns, *extra = case
    assert can_i(kube, SA, verb, resource, ns, *extra)


@pytest.mark.parametrize("case", DENIED, ids=_id)
def test_controller_cannot(
    kube: KubeAPIServer, installed_defaults: Any, team_namespace: str, case: tuple[Any, ...]
) -> None:
    verb, resource, ns, *extra = case
    assert not can_i(kube, SA, verb, resource, ns, *extra)


def test_watch_namespaces_confine_the_controller(
    kube: KubeAPIServer, installed_all_values: Any, team_namespace: str
) -> None:
    for ns in ("chaos-a", "chaos-b"):
        assert can_i(kube, SA_ALL, "list", "workflows.chaosflow.io", ns)
        assert can_i(kube, SA_ALL, "create", "deployments.apps", ns)  # an extra chaos target
        assert can_i(kube, SA_ALL, "delete", "networkchaos.chaos-mesh.org", ns)
        assert not can_i(kube, SA_ALL, "delete", "iochaos.chaos-mesh.org", ns)  # not listed there
    assert not can_i(kube, SA_ALL, "list", "workflows.chaosflow.io", "team-x")
    assert not can_i(kube, SA_ALL, "list", "workflows.chaosflow.io", None)  # not cluster-wide
    assert can_i(kube, SA_ALL, "update", "leases.coordination.k8s.io/chaosflow-all-leader", NAMESPACE)
    assert not can_i(kube, SA_ALL, "update", "leases.coordination.k8s.io/chaosflow-controller", NAMESPACE)
