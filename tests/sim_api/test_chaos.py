"""Simulated Chaos Mesh: CRDs, status, selection modes, pod-kill, two-step deletion."""

from __future__ import annotations

import random
from typing import Any

import pytest

from actors.sim import CHAOS_KINDS, NotFoundError, SimCluster, SimConfig
from engine.clock import VIRTUAL_EPOCH, VirtualClock
from tests.sim_api.timers import FakeTimers


def chaos(kind: str, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "chaos-mesh.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "namespace": "default"},
        "spec": spec,
    }


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}


def add_pods(cluster: SimCluster, n: int, labels: dict[str, str], ns: str = "default") -> list[str]:
    names = []
    for i in range(n):
        name = f"{labels.get('app', 'p')}-{i}"
        cluster.api.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"containers": [{"name": "c", "image": "nginx", "command": ["sleep", "infinity"]}]},
            }
        )
        names.append(name)
    return names


def test_chaos_crds_are_installed(cluster: SimCluster) -> None:
    crds = {c["metadata"]["name"] for c in cluster.api.list("CustomResourceDefinition")["items"]}
    for kind in CHAOS_KINDS:
        assert f"{kind.lower()}.chaos-mesh.org" in crds
        rt = cluster.api.resolve(kind)
        assert rt.namespaced and rt.has_status_subresource and rt.api_version == "chaos-mesh.org/v1alpha1"


def test_pod_kill_is_one_shot(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    add_pods(cluster, 3, {"app": "web"})
    add_pods(cluster, 2, {"app": "db"})
    timers.advance(2)
    api.create(
        chaos("PodChaos", "kill", action="pod-kill", mode="all", selector={"labelSelectors": {"app": "web"}})
    )
    created = api.get("PodChaos", "kill")
    assert created["metadata"]["finalizers"] == ["chaos-mesh/records"]
    assert created["status"]["experiment"]["desiredPhase"] == "Run"
    assert conditions(created)["AllInjected"] == "False"
    timers.advance(0.1)
    obj = api.get("PodChaos", "kill")
    assert conditions(obj) == {
        "Selected": "True",
        "AllInjected": "True",
        "AllRecovered": "False",
        "Paused": "False",
    }
    records = obj["status"]["experiment"]["containerRecords"]
    assert [r["id"] for r in records] == ["default/web-0", "default/web-1", "default/web-2"]
    assert all(r["phase"] == "Injected" and r["injectedCount"] == 1 for r in records)
    # the pods were really deleted (grace 0), the others kept
    assert [p["metadata"]["name"] for p in api.list("Pod")["items"]] == ["db-0", "db-1"]
    # one-shot: new matching pods are not killed later
    add_pods(cluster, 1, {"app": "web"})
    timers.run_until_idle(100)
    assert api.get("Pod", "web-0")["metadata"]["name"] == "web-0"


def test_deletion_is_two_step(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    add_pods(cluster, 2, {"app": "web"})
    api.create(
        chaos("NetworkChaos", "net", action="delay", mode="one", selector={"labelSelectors": {"app": "web"}})
    )
    timers.advance(1)
    assert conditions(api.get("NetworkChaos", "net"))["AllInjected"] == "True"
    events: list[tuple[str, dict[str, str], bool]] = []
    api.watch(
        "NetworkChaos",
        resource_version=api.resource_version(),
        callback=lambda e, o: events.append((e, conditions(o), "deletionTimestamp" in o["metadata"])),
    )
    out = api.delete("NetworkChaos", "net")
    assert "deletionTimestamp" in out["metadata"]  # step 1: still there, being deleted
    assert api.get("NetworkChaos", "net")["metadata"]["finalizers"] == ["chaos-mesh/records"]
    timers.run_until_idle()
    with pytest.raises(NotFoundError):
        api.get("NetworkChaos", "net")
    assert [e for e, _, _ in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert events[1][1]["AllRecovered"] == "True" and events[1][1]["AllInjected"] == "False"
    assert all(deleting for _, _, deleting in events)
    # network chaos has no object effect: the pods are untouched
    assert len(api.list("Pod")["items"]) == 2


def test_duration_and_pause(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    add_pods(cluster, 1, {"app": "web"})
    api.create(
        chaos("StressChaos", "s", mode="all", duration="30s", selector={"labelSelectors": {"app": "web"}})
    )
    timers.advance(10)
    assert api.get("StressChaos", "s")["status"]["experiment"]["desiredPhase"] == "Run"
    timers.advance(25)
    obj = api.get("StressChaos", "s")
    assert obj["status"]["experiment"]["desiredPhase"] == "Stop"
    assert conditions(obj)["AllRecovered"] == "True" and conditions(obj)["AllInjected"] == "False"
    assert obj["status"]["experiment"]["containerRecords"][0]["recoveredCount"] == 1

    api.create(chaos("IOChaos", "io", mode="all", selector={"labelSelectors": {"app": "web"}}))
    timers.advance(1)
    api.patch("IOChaos", "io", {"metadata": {"annotations": {"experiment.chaos-mesh.org/pause": "true"}}})
    timers.advance(1)
    obj = api.get("IOChaos", "io")
    assert conditions(obj)["Paused"] == "True" and obj["status"]["experiment"]["desiredPhase"] == "Stop"


def test_selector_defaults_to_own_namespace_and_filters(cluster: SimCluster, timers: FakeTimers) -> None:
    api = cluster.api
    api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    add_pods(cluster, 2, {"app": "web"}, ns="other")
    add_pods(cluster, 1, {"app": "web"})
    api.create(
        chaos(
            "PodChaos", "here", action="pod-failure", mode="all", selector={"labelSelectors": {"app": "web"}}
        )
    )
    api.create(
        chaos(
            "PodChaos",
            "there",
            action="pod-failure",
            mode="all",
            selector={
                "namespaces": ["other"],
                "expressionSelectors": [{"key": "app", "operator": "In", "values": ["web"]}],
            },
        )
    )
    api.create(
        chaos(
            "PodChaos", "explicit", action="pod-failure", mode="all", selector={"pods": {"other": ["web-1"]}}
        )
    )
    api.create(
        chaos("PodChaos", "none", action="pod-failure", mode="all", selector={"labelSelectors": {"app": "x"}})
    )
    timers.advance(1)

    def ids(name: str) -> list[str]:
        return [r["id"] for r in api.get("PodChaos", name)["status"]["experiment"]["containerRecords"]]

    assert ids("here") == ["default/web-0"]
    assert ids("there") == ["other/web-0", "other/web-1"]
    assert ids("explicit") == ["other/web-1"]
    assert ids("none") == []
    assert conditions(api.get("PodChaos", "none"))["Selected"] == "False"
    # pod-failure only changes status
    assert len(api.list("Pod")["items"]) == 3


@pytest.mark.parametrize(
    ("mode", "value", "count"),
    [("one", "", 1), ("all", "", 10), ("fixed", "3", 3), ("fixed", "99", 10), ("fixed-percent", "25", 2)],
)
def test_modes(cluster: SimCluster, timers: FakeTimers, mode: str, value: str, count: int) -> None:
    add_pods(cluster, 10, {"app": "web"})
    cluster.api.create(
        chaos(
            "PodChaos",
            "m",
            action="pod-kill",
            mode=mode,
            value=value,
            selector={"labelSelectors": {"app": "web"}},
        )
    )
    timers.advance(1)
    records = cluster.api.get("PodChaos", "m")["status"]["experiment"]["containerRecords"]
    assert len(records) == count
    assert len(cluster.api.list("Pod")["items"]) == 10 - count


def test_random_selection_is_seeded() -> None:
    def run(seed: int) -> list[str]:
        clock = VirtualClock()
        timers = FakeTimers(clock)
        cl = SimCluster("c", clock, timers, random.Random(seed), config=SimConfig(strict=True))
        add_pods(cl, 20, {"app": "web"})
        cl.api.create(
            chaos(
                "PodChaos",
                "r",
                action="pod-kill",
                mode="random-max-percent",
                value="50",
                selector={"labelSelectors": {"app": "web"}},
            )
        )
        cl.api.create(
            chaos(
                "PodChaos",
                "one",
                action="pod-failure",
                mode="one",
                selector={"labelSelectors": {"app": "web"}},
            )
        )
        timers.run_until_idle(10)
        return [
            r["id"]
            for n in ("r", "one")
            for r in cl.api.get("PodChaos", n)["status"]["experiment"]["containerRecords"]
        ]

    assert run(1) == run(1)
    assert any(run(1) != run(s) for s in range(2, 6))


def test_non_pod_chaos_kinds(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(chaos("AWSChaos", "aws", action="ec2-stop", ec2Instance="i-123"))
    timers.advance(1)
    obj = cluster.api.get("AWSChaos", "aws")
    assert conditions(obj)["AllInjected"] == "True"
    assert obj["status"]["experiment"]["containerRecords"][0]["id"] == "default/aws"


def test_chaos_deleted_before_injection(cluster: SimCluster, timers: FakeTimers) -> None:
    cluster.api.create(chaos("PodChaos", "early", action="pod-kill", mode="all"))
    cluster.api.delete("PodChaos", "early")
    timers.run_until_idle()
    with pytest.raises(NotFoundError):
        cluster.api.get("PodChaos", "early")
    assert timers.now() - VIRTUAL_EPOCH == pytest.approx(0.1)
