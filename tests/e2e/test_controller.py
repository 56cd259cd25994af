"""`chaosflow controller` against a real kube-apiserver + etcd, as a subprocess.

The CRDs come from `chaosflow crds`; Workflows use the generic `Chaos` kind with a ConfigMap as
the "chaos" object (no chaos controller needed), so the test sees exactly what is created and
deleted by watching ConfigMaps. Durations are a few seconds on the real clock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from actors.base import ActorError
from actors.kube import ClusterConfig, KubePlayground, RetryPolicy
from engine.crd import render_all

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
WF_API = "chaosflow.io/v1alpha1"


def eventually(fn: Callable[[], T], timeout: float = 30.0, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (AssertionError, ActorError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)


class Controller:
    """One `python -m engine.cli controller` subprocess."""

    def __init__(self, kube: KubeAPIServer, workdir: Path, name: str, *args: str) -> None:
        self.log = workdir / f"controller-{name}.log"
        argv = [
            sys.executable,
            "-m",
            "engine.cli",
            "controller",
            "--kubeconfig",
            str(kube.kubeconfig),
            "--health-addr",
            "127.0.0.1:0",
            "--lease-namespace",
            "default",
            "--lease-duration",
            "3",
            "--renew-deadline",
            "2",
            "--retry-period",
            "0.5",
            "--identity",
            name,
            *args,
        ]
        self._f = self.log.open("ab")
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=self._f, stderr=subprocess.STDOUT)
        self.port = eventually(self._port, timeout=20)

    def _port(self) -> int:
        assert self.proc.poll() is None, f"controller exited {self.proc.returncode}:\n{self.tail()}"
        m = re.search(r"health: listening on port (\d+)", self.log.read_text())
        assert m, "no port yet"
        return int(m.group(1))

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def tail(self, n: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self._f.close()

    def terminate(self, timeout: float = 15) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._f.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def pg(kube: KubeAPIServer) -> Iterator[KubePlayground]:
    cfg = ClusterConfig(kubeconfig=kube.kubeconfig, retry=RetryPolicy(attempts=6, initial=0.05, cap=0.5))
    playground = KubePlayground({"default": cfg})
    yield playground
    playground.close()


@pytest.fixture(scope="module")
def crds(kube: KubeAPIServer, pg: KubePlayground) -> None:
    kube.kubectl("apply", "-f", "-", input=render_all())
    from engine.crd import all_crds

    for c in all_crds().values():
        kube.kubectl("wait", "--for=condition=Established", f"crd/{c['metadata']['name']}", "--timeout=30s")


@pytest.fixture
def ns(pg: KubePlayground, crds: None) -> Iterator[str]:
    name = f"cf-{uuid.uuid4().hex[:8]}"
    pg.create("default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name


@pytest.fixture
def controllers(kube: KubeAPIServer, tmp_path: Path) -> Iterator[Callable[..., Controller]]:
    started: list[Controller] = []

    def start(name: str, *args: str) -> Controller:
        c = Controller(kube, tmp_path, name, *args)
        started.append(c)
        return c

    yield start
    for c in started:
        if c.proc.poll() is None:
            c.terminate()
    if os.environ.get("CHAOSFLOW_E2E_SHOW_LOGS"):
        for c in started:
            print(c.log.read_text())


def chaos_cm(name: str, hold: str) -> dict[str, Any]:
    return {
        "name": name,
        "templateType": "Chaos",
        "duration": hold,
        "chaos": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"chaos": name}}},
    }


def workflow(ns: str, name: str, templates: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": WF_API,
        "kind": "Workflow",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"entry": templates[0]["name"], "templates": templates, **spec},
    }


def get_wf(pg: KubePlayground, ns: str, name: str) -> dict[str, Any] | None:
    return pg.get("default", WF_API, "Workflow", ns, name)


def wait_phase(pg: KubePlayground, ns: str, name: str, phase: str, timeout: float = 40) -> dict[str, Any]:
    def check() -> dict[str, Any]:
        wf = get_wf(pg, ns, name)
        assert wf is not None
        got = (wf.get("status") or {}).get("phase")
        assert got == phase, f"phase {got}, want {phase}: {(wf.get('status') or {}).get('message')}"
        return wf

    return eventually(check, timeout=timeout)


def chaos_objects(pg: KubePlayground, ns: str) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in pg.list("default", "v1", "ConfigMap", ns, label_selector="chaosflow.io/workflow")
    )


class Added:
    """Counts ADDED/DELETED ConfigMap events (watch from the test): nothing may be created twice."""

    def __init__(self, pg: KubePlayground, ns: str) -> None:
        self.events: list[tuple[str, str]] = []
        self.sub = pg.watch("default", "v1", "ConfigMap", ns, self)

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        if "chaosflow.io/workflow" in (obj["metadata"].get("labels") or {}):
            self.events.append((event_type, obj["metadata"]["name"]))

    def count(self, event_type: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for t, n in list(self.events):
            if t == event_type:
                out[n] = out.get(n, 0) + 1
        return out


# ---------------------------------------------------------------------------------------------------
def test_crds_install_and_kubectl_apply(kube: KubeAPIServer, crds: None, ns: str) -> None:
    crd = json.loads(kube.kubectl("get", "crd", "workflows.chaosflow.io", "-o", "json").stdout)
    conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conds.get("Established") == "True" and conds.get("NonStructuralSchema") is None
    # the quickstart names namespace "default"; no controller watches it in these tests
    kube.kubectl("apply", "-f", str(REPO / "examples" / "quickstart.yaml"))
    out = kube.kubectl("get", "wf", "quickstart", "-n", "default").stdout
    assert out.split("\n")[0].split() == ["NAME", "PHASE", "PROGRESS", "AGE"], out
    # the quickstart's durations round-trip (string or {min, max} range, preserved)
    wf = json.loads(kube.kubectl("get", "wf", "quickstart", "-n", "default", "-o", "json").stdout)
    assert wf["spec"]["templates"][1]["duration"] == {"min": "10s", "max": "30s"}
    kube.kubectl("delete", "wf", "quickstart", "-n", "default")


def test_runs_serial_parallel_suspend_chaos(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller], kube: KubeAPIServer
) -> None:
    watch = Added(pg, ns)
    ctl = controllers("solo", "--namespace", ns)
    templates: list[dict[str, Any]] = [
        {"name": "main", "templateType": "Serial", "children": ["wait", "both"]},
        {"name": "wait", "templateType": "Suspend", "duration": "500ms"},
        {"name": "both", "templateType": "Parallel", "children": ["cm-a", "cm-b"]},
        chaos_cm("cm-a", "1s"),
        chaos_cm("cm-b", "2s"),
    ]
    pg.create("default", workflow(ns, "basic", templates))
    wf = wait_phase(pg, ns, "basic", "Succeed")
    st = wf["status"]
    assert st["progress"] == "5/5"
    assert {n["templateName"]: n["phase"] for n in st["nodes"]} == dict.fromkeys(
        ["main", "wait", "both", "cm-a", "cm-b"], "Succeed"
    )
    assert "chaosflow.io/cleanup" in wf["metadata"]["finalizers"]
    assert st["engine"]["revision"] >= 1
    eventually(lambda: _assert(sorted(watch.count("DELETED")) == sorted(watch.count("ADDED"))), timeout=5)
    assert len(watch.count("ADDED")) == 2 and set(watch.count("ADDED").values()) == {1}
    assert chaos_objects(pg, ns) == []
    out = kube.kubectl("get", "wf", "basic", "-n", ns).stdout
    assert "Succeed" in out and "5/5" in out
    # Events with Chaos Mesh's reasons
    reasons = eventually(lambda: _reasons(pg, ns, {"WorkflowAccomplished", "ChaosCRCreated"}), timeout=10)
    assert {"EntryCreated", "NodesCreated", "ChaosCRCreated", "ChaosCRDeleted"} <= reasons
    code, body = ctl.get("/metrics")
    assert code == 200 and "chaosflow_controller_is_leader 1.0" in body
    assert ctl.get("/healthz")[0] == 200 and ctl.get("/readyz")[0] == 200
    # deleting a finished workflow: the finalizer goes at once
    pg.delete("default", WF_API, "Workflow", ns, "basic")
    eventually(lambda: _assert(get_wf(pg, ns, "basic") is None), timeout=10)
    assert ctl.terminate() == 0
    lease = pg.get("default", "coordination.k8s.io/v1", "Lease", "default", "chaosflow-controller")
    assert lease is not None and not lease["spec"].get("holderIdentity")  # released on SIGTERM


def _reasons(pg: KubePlayground, ns: str, need: set[str]) -> set[str]:
    got = {e.get("reason") for e in pg.list("default", "v1", "Event", ns)}
    assert need <= got, got
    return {str(r) for r in got}


def _assert(cond: bool) -> None:
    assert cond


def test_task_deadline_abort_and_invalid(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("solo2", "--namespace", ns, "--no-leader-elect")
    # a Task: its pod never runs (no kubelet) until the test plays the kubelet
    task = {
        "name": "probe",
        "templateType": "Task",
        "task": {"container": {"name": "c", "image": "busybox", "command": ["false"]}},
    }
    pg.create("default", workflow(ns, "task", [task]))

    def pod() -> dict[str, Any]:
        pods = pg.list("default", "v1", "Pod", ns, label_selector="chaosflow.io/workflow=task")
        assert len(pods) == 1
        return pods[0]

    p = eventually(pod)
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "c",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 3, "reason": "Error"}},
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
    wf = wait_phase(pg, ns, "task", "Failed")
    assert "exit" in json.dumps(wf["status"]["nodes"][0]).lower()

    # a deadline: chaos held 60s in a workflow with a 2s deadline -> Failed, chaos removed
    pg.create("default", workflow(ns, "late", [chaos_cm("hold", "60s")], deadline="2s"))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    wf = wait_phase(pg, ns, "late", "Failed", timeout=20)
    assert "deadline" in wf["status"]["message"]
    eventually(lambda: _assert(chaos_objects(pg, ns) == []), timeout=10)

    # abort by Chaos Mesh's annotation
    pg.create("default", workflow(ns, "stopme", [chaos_cm("hold", "60s")]))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    pg.patch(
        "default",
        WF_API,
        "Workflow",
        ns,
        "stopme",
        {"metadata": {"annotations": {"workflow.chaos-mesh.org/abort": "true"}}},
    )
    wf = wait_phase(pg, ns, "stopme", "Failed", timeout=15)
    assert "abort" in wf["status"]["message"]
    assert chaos_objects(pg, ns) == []

    # an invalid workflow fails with the validation message, nothing runs
    bad = workflow(ns, "bad", [{"name": "main", "templateType": "Serial", "children": ["nope"]}])
    pg.create("default", bad)
    wf = wait_phase(pg, ns, "bad", "Failed", timeout=15)
    assert "nope" in wf["status"]["message"]


def test_delete_running_workflow_cleans_up_first(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("solo3", "--namespace", ns, "--no-leader-elect")
    seen: list[tuple[str, str, int]] = []

    def rv(o: dict[str, Any]) -> int:
        return int((o.get("metadata") or {}).get("resourceVersion") or 0)

    pg.create("default", workflow(ns, "doomed", [chaos_cm("hold", "60s")]))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    subs = [
        pg.watch("default", "v1", "ConfigMap", ns, lambda t, o: seen.append((t, "cm", rv(o)))),
        pg.watch("default", WF_API, "Workflow", ns, lambda t, o: seen.append((t, "wf", rv(o)))),
    ]
    pg.delete("default", WF_API, "Workflow", ns, "doomed")
    eventually(lambda: _assert(get_wf(pg, ns, "doomed") is None), timeout=15)
    eventually(lambda: _assert({"cm", "wf"} <= {k for t, k, _ in seen if t == "DELETED"}), timeout=5)
    assert chaos_objects(pg, ns) == []
    # Two watch streams are not ordered with each other; etcd's revision (the resourceVersion of
    # a DELETED event's object) is: the chaos ConfigMap went before the Workflow object.
    deleted = {k: r for t, k, r in seen if t == "DELETED"}
    assert 0 < deleted["cm"] < deleted["wf"], seen
    for s in subs:
        s.stop()


def test_kill_9_at_several_points_then_resume(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    watch = Added(pg, ns)
    templates: list[dict[str, Any]] = [
        {"name": "main", "templateType": "Serial", "children": ["w1", "cm-a", "w2", "cm-b"]},
        {"name": "w1", "templateType": "Suspend", "duration": "300ms"},
        chaos_cm("cm-a", "3s"),
        {"name": "w2", "templateType": "Suspend", "duration": "300ms"},
        chaos_cm("cm-b", "2s"),
    ]
    ctl = controllers("k0", "--namespace", ns)
    pg.create("default", workflow(ns, "crashy", templates))
    kill_points: list[Callable[[], bool]] = [
        lambda: watch.count("ADDED").get(_cm_name("crashy", "cm-a", 2), 0) > 0,
        lambda: watch.count("DELETED").get(_cm_name("crashy", "cm-a", 2), 0) > 0,
        lambda: watch.count("ADDED").get(_cm_name("crashy", "cm-b", 4), 0) > 0,
    ]
    for i, point in enumerate(kill_points):

        def reached(point: Callable[[], bool] = point) -> None:
            assert point()

        eventually(reached, timeout=30, interval=0.02)
        ctl.kill9()
        ctl = controllers(f"k{i + 1}", "--namespace", ns)
    wf = wait_phase(pg, ns, "crashy", "Succeed", timeout=60)
    assert wf["status"]["progress"] == "5/5"
    added = watch.count("ADDED")
    assert added == {_cm_name("crashy", "cm-a", 2): 1, _cm_name("crashy", "cm-b", 4): 1}, watch.events
    eventually(lambda: _assert(chaos_objects(pg, ns) == []), timeout=10)


def _cm_name(wf: str, template: str, counter: int) -> str:
    from engine.naming import object_name

    return object_name(wf, f"{template}-{counter}")


def test_two_controllers_only_the_leader_acts(
    pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    a = controllers("ctl-a", "--namespace", ns)
    eventually(lambda: _assert(_holder(pg) == "ctl-a"), timeout=20)
    b = controllers("ctl-b", "--namespace", ns)
    eventually(lambda: _assert(b.get("/readyz")[0] == 200), timeout=10)
    assert "standing by" in b.get("/readyz")[1]
    pg.create("default", workflow(ns, "ha", [chaos_cm("hold", "4s")]))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    assert "chaosflow_controller_is_leader 0.0" in b.get("/metrics")[1]
    a.kill9()
    eventually(lambda: _assert(_holder(pg) == "ctl-b"), timeout=20)
    wf = wait_phase(pg, ns, "ha", "Succeed", timeout=30)
    assert wf["status"]["progress"] == "1/1"
    assert chaos_objects(pg, ns) == []
    lease = pg.get("default", "coordination.k8s.io/v1", "Lease", "default", "chaosflow-controller")
    assert lease is not None and lease["spec"]["leaseTransitions"] >= 1


def _holder(pg: KubePlayground) -> str | None:
    lease = pg.get("default", "coordination.k8s.io/v1", "Lease", "default", "chaosflow-controller")
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_apiserver_restart_mid_run(
    kube: KubeAPIServer, pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("survivor", "--namespace", ns, "--no-leader-elect")
    pg.create("default", workflow(ns, "survive", [chaos_cm("hold", "4s")]))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    kube.restart_apiserver()
    wf = wait_phase(pg, ns, "survive", "Succeed", timeout=60)
    assert wf["status"]["progress"] == "1/1"
    assert chaos_objects(pg, ns) == []
