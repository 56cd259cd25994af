"""More `chaosflow controller` scenarios against a real kube-apiserver + etcd (subprocess).

- exit handlers (`spec.onExit` and a template `onExit`) run to the end in controller mode after
  the main tree failed, and the chaos object created by the main tree is removed;
- the controller's Workflow watch gets 410 Gone (its connection to the API server is cut by a
  TCP proxy while a Workflow is created and etcd is compacted) and re-lists: the running Workflow,
  the one it missed and one created afterwards all finish.

Helpers and fixtures come from test_controller.py (TCPProxy from test_kube_playground.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actors.kube import KubePlayground
from tests.e2e import test_controller as tc
from tests.e2e.test_controller import (
    Controller,
    _cm_name,
    chaos_cm,
    chaos_objects,
    eventually,
    get_wf,
    wait_phase,
    workflow,
)
from tests.e2e.test_kube_playground import TCPProxy, write_kubeconfig

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

# the fixtures of test_controller.py (pytest finds fixtures among a module's attributes)
pg = tc.pg
crds = tc.crds
ns = tc.ns
controllers = tc.controllers


def _fail_pod(pg: KubePlayground, ns: str, wf: str, exit_code: int = 3) -> None:
    """Plays the kubelet: the workflow's only pod ends Failed with `exit_code`."""

    def pod() -> dict[str, Any]:
        pods = pg.list("default", "v1", "Pod", ns, label_selector=f"chaosflow.io/workflow={wf}")
        assert len(pods) == 1, pods
        return pods[0]

    p = eventually(pod, timeout=15)
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "c",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "reason": "Error"}},
            }
        ],
    }
    c = pg.cluster("default")
    c.dynamic.patch(
        c.resource("v1", "Pod").status,
        body={"status": status},
        name=p["metadata"]["name"],
        namespace=ns,
        content_type="application/merge-patch+json",
    )


def test_exit_handlers_run_after_main_tree_fails(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("exits", "--namespace", ns, "--no-leader-elect")
    templates: list[dict[str, Any]] = [
        {"name": "main", "templateType": "Parallel", "children": ["hold", "probe"]},
        chaos_cm("hold", "60s"),
        {
            "name": "probe",
            "templateType": "Task",
            "onExit": "verify",
            "task": {"container": {"name": "c", "image": "busybox", "command": ["false"]}},
        },
        {"name": "verify", "templateType": "Suspend", "duration": "300ms"},
        {"name": "report", "templateType": "Suspend", "duration": "500ms"},
    ]
    pg.create("default", workflow(ns, "exits", templates, onExit="report"))
    # the chaos object of the main tree exists before the main tree fails
    hold = _cm_name("exits", "hold", 1)  # the generic Chaos object (the Task has a ConfigMap too)

    def chaos_created() -> None:
        assert hold in chaos_objects(pg, ns), (get_wf(pg, ns, "exits") or {}).get("status")

    eventually(chaos_created, timeout=15)
    _fail_pod(pg, ns, "exits")

    wf = wait_phase(pg, ns, "exits", "Failed", timeout=25)
    st = wf["status"]
    nodes = st["nodes"]
    by_template: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        by_template.setdefault(n["templateName"], []).append(n)
    # both exit handlers ran once, are marked as such, and succeeded
    for handler in ("verify", "report"):
        assert len(by_template.get(handler, [])) == 1, nodes
        node = by_template[handler][0]
        assert node.get("exitHandler") is True, node
        assert node["phase"] == "Succeed", node
    assert st.get("exitNode") == by_template["report"][0]["name"], st
    # the task attempt failed by itself, the chaos sibling was stopped, the entry failed
    assert [n["reason"] for n in by_template["probe"] if n["phase"] == "Failed"], by_template["probe"]
    assert "exit" in json.dumps(by_template["probe"]).lower()
    assert by_template["hold"][0]["phase"] == "Failed", by_template["hold"]
    assert by_template["hold"][0].get("reason") == "SiblingFailed", by_template["hold"]
    entry = by_template["main"][0]
    assert entry["phase"] == "Failed" and entry.get("message"), entry
    # the workflow's message starts with the main tree's failure, not with anything of a handler
    assert st["message"].startswith(entry["message"]), (st["message"], entry)
    assert "code 3" in st["message"], st["message"]
    # the chaos object created by the main tree is gone
    eventually(lambda: _assert(hold not in chaos_objects(pg, ns)), timeout=10)
    assert pg.get("default", "v1", "ConfigMap", ns, hold) is None
    eventually(lambda: _assert(chaos_objects(pg, ns) == []), timeout=10)  # nor the Task's ConfigMap


def _assert(cond: bool, why: str = "") -> None:
    assert cond, why


def _watch_lines(ctl: Controller, what: str) -> list[str]:
    return [
        line
        for line in ctl.log.read_text(errors="replace").splitlines()
        if line.startswith(("info", "warning")) and "watch Workflow" in line and what in line
    ]


def test_workflow_watch_410_relists_and_keeps_running(
    kube: KubeAPIServer, pg: KubePlayground, ns: str, controllers: Callable[..., Controller], tmp_path: Path
) -> None:
    assert not kube.watch_cache  # watches are served by etcd: a compacted resourceVersion is 410
    # The controller talks to the API server through a proxy that the test can cut (the test's
    # own client goes direct), so its Workflow watch reconnects exactly when the test says.
    proxy = TCPProxy(kube.secure_port)
    try:
        kubeconfig = write_kubeconfig(
            kube, tmp_path / "proxied", {"proxied": f"https://127.0.0.1:{proxy.port}"}, "proxied"
        )
        ctl = controllers("gone", "--kubeconfig", str(kubeconfig), "--namespace", ns, "--no-leader-elect")
        templates: list[dict[str, Any]] = [
            {"name": "main", "templateType": "Serial", "children": ["pause", "cm"]},
            {"name": "pause", "templateType": "Suspend", "duration": "5s"},
            chaos_cm("cm", "500ms"),
        ]
        pg.create("default", workflow(ns, "first", templates))

        def pausing() -> dict[str, Any]:
            wf = wait_phase(pg, ns, "first", "Running", timeout=0)
            phases = {n["templateName"]: n["phase"] for n in wf["status"].get("nodes") or []}
            assert phases.get("pause") not in (None, "Init", "Succeed", "Failed"), phases
            return wf

        seen_rv = int(eventually(pausing, timeout=15)["metadata"]["resourceVersion"])
        assert _watch_lines(ctl, "expired") == []

        proxy.cut()  # the controller's watch drops and cannot reconnect until resume()
        try:
            eventually(
                lambda: _assert(bool(_watch_lines(ctl, "watch failed")), ctl.tail(30)),
                timeout=10,
                interval=0.05,
            )
            # a change the controller misses, then etcd forgets the history since its resourceVersion
            pg.create("default", workflow(ns, "second", [chaos_cm("cm2", "500ms")]))
            # one more write, so that the compaction is past the watch's resume point (rv + 1)
            pg.create(
                "default",
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bump", "namespace": ns}},
            )
            compacted = kube.compact_etcd()
            assert compacted > seen_rv
        finally:
            proxy.resume()

        # the watch resumes from its old resourceVersion: 410 Gone, then it lists again
        def relisted() -> None:
            log = ctl.tail(60)
            assert _watch_lines(ctl, "expired (") and _watch_lines(ctl, "listing again"), log
            listed = _watch_lines(ctl, "changes since the last state")
            assert listed, log
            # the re-list delivers what the watch missed: at least the ADDED of "second"
            assert int(re.findall(r"(\d+) changes since", listed[-1])[0]) >= 1, listed

        eventually(relisted, timeout=15)

        # a Workflow created after the re-list is seen through the new watch
        pg.create("default", workflow(ns, "third", [chaos_cm("cm3", "500ms")]))
        for name, progress in (("second", "1/1"), ("third", "1/1"), ("first", "3/3")):
            wf = wait_phase(pg, ns, name, "Succeed", timeout=20)
            assert wf["status"]["progress"] == progress, (name, wf["status"])
        eventually(lambda: _assert(chaos_objects(pg, ns) == []), timeout=10)
        assert ctl.terminate() == 0, ctl.tail()  # while the proxy still forwards
    finally:
        proxy.close()
