"""charts/chaosflow offline: helm lint, and checks on the rendered manifests (no API server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.conftest import ALL_VALUES, CHART, Helm

Doc = dict[str, Any]

# docs/rbac.md, for the namespaces the controller watches (default values).
EXPECTED_WORKLOAD_RULES = [
    (["chaosflow.io"], ["workflows"], ["get", "list", "watch", "patch"]),
    (["chaosflow.io"], ["workflows/status"], ["update", "patch"]),
    (["chaosflow.io"], ["workflows/finalizers"], ["update"]),
    (["chaosflow.io"], ["cronworkflows"], ["get", "list", "watch"]),
    (["chaosflow.io"], ["cronworkflows/status"], ["update", "patch"]),
    ([""], ["events"], ["create", "patch"]),
    ([""], ["pods"], ["get", "list", "watch", "create", "delete"]),
    ([""], ["pods/log"], ["get"]),
    ([""], ["configmaps"], ["get", "create", "delete"]),
]
# after the chaos targets: what CronWorkflows need of their children (rbac.cronWorkflows)
CRON_CHILD_RULE = (["chaosflow.io"], ["workflows"], ["create", "delete"])
CHAOS_MESH_KINDS = {"podchaos", "networkchaos", "iochaos", "stresschaos", "timechaos"}


def by_kind(docs: list[Doc], kind: str) -> list[Doc]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[Doc], kind: str) -> Doc:
    found = by_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {[d['metadata']['name'] for d in found]}"
    return found[0]


def rule_tuples(role: Doc) -> list[tuple[list[str], list[str], list[str]]]:
    return [(r["apiGroups"], r["resources"], r["verbs"]) for r in role["rules"]]


# --- helm lint -------------------------------------------------------------------------------------
@pytest.mark.parametrize("values", [None, ALL_VALUES], ids=["defaults", "all-values"])
@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint(helm: Helm, values: Any, strict: bool) -> None:
    args = ["lint", str(CHART), "--namespace", "chaosflow-system"]
    if values is not None:
        args += ["-f", str(values)]
    if strict:
        args.append("--strict")
    out = helm.run(*args).stdout
    assert "0 chart(s) failed" in out, out


# --- RBAC ------------------------------------------------------------------------------------------
def all_rules(docs: list[Doc]) -> list[Doc]:
    return [r for d in docs if d["kind"] in ("ClusterRole", "Role") for r in d["rules"]]


@pytest.mark.parametrize("values", [None, ALL_VALUES], ids=["defaults", "all-values"])
def test_rbac_has_no_wildcards(render: Any, values: Any) -> None:
    docs = render(*([values] if values else []))
    rules = all_rules(docs)
    assert rules
    for rule in rules:
        for field in ("apiGroups", "resources", "verbs", "resourceNames", "nonResourceURLs"):
            for item in rule.get(field, []):
                assert "*" not in item, f"wildcard in {field}: {rule}"
        assert not set(rule["verbs"]) & {"escalate", "bind", "impersonate", "deletecollection"}, rule
        assert "secrets" not in rule["resources"] and "nodes" not in rule["resources"], rule


def test_default_rbac_is_the_table_of_docs_rbac(render: Any) -> None:
    docs = render()
    role = one(docs, "ClusterRole")
    rules = rule_tuples(role)
    assert rules[: len(EXPECTED_WORKLOAD_RULES)] == EXPECTED_WORKLOAD_RULES
    chaos, cron_children = rules[len(EXPECTED_WORKLOAD_RULES) :]
    assert cron_children == CRON_CHILD_RULE
    assert chaos[0] == ["chaos-mesh.org"]
    assert set(chaos[1]) >= CHAOS_MESH_KINDS
    assert chaos[2] == ["get", "list", "watch", "create", "delete", "patch"]
    binding = one(docs, "ClusterRoleBinding")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "chaosflow", "namespace": "chaosflow-system"}
    ]
    # Leader election: a Role in the release namespace only, get/update on the Lease's name.
    (lease_role,) = by_kind(docs, "Role")
    assert lease_role["metadata"]["namespace"] == "chaosflow-system"
    assert lease_role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["chaosflow-controller"],
            "verbs": ["get", "update"],
        },
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]


def test_watch_namespaces_gives_roles_not_a_cluster_role(render: Any) -> None:
    docs = render(ALL_VALUES)
    assert not by_kind(docs, "ClusterRole") and not by_kind(docs, "ClusterRoleBinding")
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in by_kind(docs, "Role")}
    assert roles == {
        ("chaos-a", "chaosflow-all"),
        ("chaos-b", "chaosflow-all"),
        ("chaosflow-system", "chaosflow-all-leader-election"),
    }
    bindings = by_kind(docs, "RoleBinding")
    assert len(bindings) == 3
    for b in bindings:
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "chaosflow-controller", "namespace": "chaosflow-system"}
        ]
    role_a = next(d for d in by_kind(docs, "Role") if d["metadata"]["namespace"] == "chaos-a")
    assert (["apps"], ["deployments"], ["get", "list", "watch", "create", "delete", "patch"]) in rule_tuples(
        role_a
    )


def test_optional_rules_can_be_turned_off(render: Any) -> None:
    docs = render(
        set_values=["rbac.tasks=false", "rbac.cronWorkflows=false", "rbac.workflowFinalizers=false"]
    )
    resources = {res for r in all_rules(docs) for res in r["resources"]}
    assert not resources & {"pods", "pods/log", "configmaps", "cronworkflows", "workflows/finalizers"}
    workflow_verbs = {v for r in all_rules(docs) if "workflows" in r["resources"] for v in r["verbs"]}
    assert not workflow_verbs & {"create", "delete"}  # only CronWorkflows create and delete them
    assert {"workflows", "workflows/status", "events", "leases"} <= resources


GOOD_TARGET = {"apiGroups": ["chaos-mesh.org"], "resources": ["podchaos"], "verbs": ["get", "create"]}


@pytest.mark.parametrize(
    "bad",
    [
        {"verbs": ["get", "*"]},
        {"resources": ["*"]},
        {"apiGroups": ["*"]},
        {"resources": ["pods/*"]},
    ],
    ids=["verbs", "resources", "apiGroups", "subresources"],
)
@pytest.mark.parametrize("schema", [True, False], ids=["schema", "template"])
def test_wildcards_are_rejected(helm: Helm, tmp_path: Path, bad: dict[str, list[str]], schema: bool) -> None:
    """By values.schema.json, and by the template itself when the schema is skipped."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"rbac": {"chaosTargets": [GOOD_TARGET, {**GOOD_TARGET, **bad}]}}))
    args = ["template", "x", str(CHART), "-f", str(values)]
    if not schema:
        args.append("--skip-schema-validation")
    result = helm.run(*args, check=False)
    assert result.returncode != 0
    if schema:
        assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    else:
        assert "rbac.chaosTargets[1]" in result.stderr and "wildcards are not allowed" in result.stderr


def test_no_rbac_when_disabled(render: Any) -> None:
    docs = render(set_values=["rbac.create=false"])
    assert not [d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io")]


# --- Deployment ------------------------------------------------------------------------------------
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@pytest.mark.parametrize("values", [None, ALL_VALUES], ids=["defaults", "all-values"])
def test_restricted_security_context(render: Any, values: Any) -> None:
    docs = render(*([values] if values else []))
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsUser"] != 0
    for c in pod["containers"]:
        for key, want in RESTRICTED_CONTAINER.items():
            assert c["securityContext"][key] == want, (c["name"], key)
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    # read-only root: /tmp is writable through an emptyDir
    (c,) = pod["containers"]
    assert {"name": "tmp", "mountPath": "/tmp"} in c["volumeMounts"]


def test_deployment_defaults(render: Any) -> None:
    docs = render()
    dep = one(docs, "Deployment")
    assert dep["spec"]["replicas"] == 2
    (c,) = dep["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "chaosflow:0.1.0"
    assert c["args"] == [
        "controller",
        "--health-addr=:8080",
        "--leader-elect",
        "--lease-name=chaosflow-controller",
        "--lease-namespace=chaosflow-system",
        "--lease-duration=15",
        "--renew-deadline=10",
        "--retry-period=2",
        "--identity=$(POD_NAME)",
        "--actor-workers=8",
        "--log-level=info",
        "--log-format=json",
    ]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http-metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http-metrics"}
    assert c["ports"] == [{"name": "http-metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["resources"]["requests"] and c["resources"]["limits"]
    svc = one(docs, "Service")
    assert svc["spec"]["ports"][0]["targetPort"] == "http-metrics"
    assert svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"]
    assert not by_kind(docs, "ServiceMonitor") and not by_kind(docs, "PrometheusRule")
    assert not by_kind(docs, "PodDisruptionBudget")


def test_deployment_all_values(render: Any) -> None:
    docs = render(ALL_VALUES)
    dep = one(docs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"].endswith("@sha256:" + "0" * 64)
    assert "--namespace=chaos-a" in c["args"] and "--namespace=chaos-b" in c["args"]
    assert "--cluster=parent=/kubeconfigs/parent:admin" in c["args"]
    assert c["ports"][0]["containerPort"] == 9090 and "--health-addr=:9090" in c["args"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in pod["affinity"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    sm = one(docs, "ServiceMonitor")
    assert sm["metadata"]["namespace"] == "monitoring"
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["chaosflow-system"]}
    assert sm["spec"]["endpoints"][0]["port"] == "http-metrics"


def test_replicas_need_leader_election(helm: Helm) -> None:
    result = helm.template(set_values=["leaderElection.enabled=false"], check=False)
    assert result.returncode != 0 and "needs leaderElection.enabled" in result.stderr
    docs = helm.render(set_values=["leaderElection.enabled=false", "replicas=1"])
    (c,) = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--no-leader-elect" in c["args"]
    assert not [d for d in by_kind(docs, "Role") if "leader" in d["metadata"]["name"]]


# --- the other engineer's files, packaged as they are ---------------------------------------------
def test_dashboard_configmap(render: Any) -> None:
    cm = one(render(), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    text = cm["data"]["chaosflow.json"]
    assert text == (CHART / "dashboards" / "chaosflow.json").read_text().rstrip("\n")
    assert json.loads(text)["uid"]
    cm = one(render(ALL_VALUES), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "chaosflow"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Chaos"}
    assert not by_kind(render(set_values=["dashboard.enabled=false"]), "ConfigMap")


def test_prometheus_rule_wraps_the_rules_file(render: Any) -> None:
    rule = one(render(set_values=["prometheusRule.enabled=true"]), "PrometheusRule")
    want = yaml.safe_load((CHART / "rules" / "chaosflow-rules.yaml").read_text())["groups"]
    assert rule["spec"]["groups"] == want
    # Prometheus templates in annotations reach the PrometheusRule untouched by Helm.
    assert any("{{" in v for g in want for r in g["rules"] for v in r.get("annotations", {}).values())


def test_every_resource_is_labelled(render: Any) -> None:
    for doc in render(ALL_VALUES):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "chaosflow", doc["kind"]
        assert labels["team"] == "chaos"
