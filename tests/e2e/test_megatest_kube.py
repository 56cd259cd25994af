"""`chaosflow megatest --kubeconfig K --parent-kubeconfig P --vm-namespace NS` on a real API server.

One kube-apiserver + etcd (harness.py) plays both clusters of megatest: the nested ("test")
cluster is reached with the admin kubeconfig, the DVP parent with a second kubeconfig of a user
that may only touch VirtualMachines, VirtualMachineOperations and CiliumNetworkPolicies in the VM
namespace (so every parent call must go to the right kubeconfig and namespace). Separate API
servers are not needed: the two clusters share no kind that megatest uses in both.

The CRDs are the simulated world's (``actors.sim.rv.api``: real groups, versions, kinds, plurals,
scopes, status subresources; schemas preserve unknown fields). There is no kubelet, no
controller-manager and no storage controller, so :class:`MiniControllers` (a thread in the test)
plays them minimally: an RV gets IOReady/Quorum True, a DRBD port and three replicas; an RVA
becomes Attached/Ready and lands in ``rv.status.actuallyAttachedTo``; Jobs complete after the
``sleep``/``timeout`` of their script, and the iptables rules their commands add and delete are
kept per node; VMOPs complete; the control-plane pods exist (recreated when killed); replicas and
attachments of deleted RVs are garbage-collected. Unless a test asks it to flap or break one
RV's conditions, everything stays healthy and the run must exit 0.

The goroutines a short run cannot reach (their periods are the seed's: attacher 30-60s, replica
chaos 30-300s, pod destroyers 30-60s, VM reboots at least 5 minutes) have their actors called
directly against the same API server (:func:`test_megatest_actors_on_a_real_api_server`).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import yaml

from actors.base import ActorError
from actors.kube import ClusterConfig, KubeError, KubePlayground
from actors.megatest import CLEANUP_LABEL
from actors.sim.rv import api as A
from engine.model import LABEL_NODE, LABEL_WORKFLOW

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "megatest"
ADMIN = "admin"
PARENT_USER = "megatest-parent"
STORAGE_NODES = ["worker-01", "worker-02", "worker-03", "worker-04"]
STORAGE_CLASSES = ["mt-r2", "mt-r3"]
JOB_NS = "default"


def eventually(fn: Callable[[], T], timeout: float = 20.0, interval: float = 0.1) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (AssertionError, ActorError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(interval)


def now_ts() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def patch_status(pg: KubePlayground, api: str, kind: str, ns: str | None, name: str, status: Any) -> None:
    """A merge patch of the status subresource (what a controller writes)."""
    c = pg.cluster(ADMIN)
    res = c.resource(api, kind)
    path = res.path(name=name, namespace=ns if res.namespaced else None) + "/status"
    c.call(
        "patch",
        f"{kind} {name} status",
        lambda: c.dynamic.request(
            "patch",
            path,
            body={"status": status},
            content_type="application/merge-patch+json",
            serialize=False,
        ),
    )


def _alive(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if not o["metadata"].get("deletionTimestamp")]


def _cond(ctype: str, reason: str) -> dict[str, Any]:
    return {"type": ctype, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now_ts()}


class MiniControllers(threading.Thread):
    """The storage, virtualization, job and pod controllers, as little as the workflow needs to
    progress (polls every ``period`` seconds; counts what it did in ``done``)."""

    def __init__(self, pg: KubePlayground, vm_ns: str, period: float = 0.2) -> None:
        super().__init__(name="megatest-mini-controllers", daemon=True)
        self.pg, self.vm_ns, self.period = pg, vm_ns, period
        self.done: dict[str, int] = {}
        self.errors: list[str] = []
        #: node -> comments of the iptables rules in place (added by losses Jobs, not yet removed)
        self.iptables: dict[str, set[str]] = {}
        self.lock = threading.Lock()
        self._job_seen: dict[str, float] = {}
        self._stop_event = threading.Event()
        #: "flap": the first ready RV loses Quorum for a moment (2 transitions: held); "break": it
        #: loses IOReady for good (1 transition: broken); None: conditions stay True
        self.incident: str | None = None
        self.victim: str | None = None
        self._ready_at: dict[str, float] = {}

    def stop(self) -> None:
        self._stop_event.set()
        self.join(10)

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                self.reconcile()
            except KubeError as e:
                if e.code != 404:  # raced with a deletion: next round
                    self.errors.append(str(e))
            except (ActorError, KeyError, ValueError) as e:  # keep going; reported by the test
                self.errors.append(str(e))
            self._stop_event.wait(self.period)

    def rules(self) -> dict[str, list[str]]:
        with self.lock:
            return {n: sorted(r) for n, r in self.iptables.items() if r}

    def _did(self, what: str) -> None:
        self.done[what] = self.done.get(what, 0) + 1

    def _list(self, api: str, kind: str, ns: str | None = None) -> list[dict[str, Any]]:
        return self.pg.list(ADMIN, api, kind, ns)

    def reconcile(self) -> None:
        rvs = {o["metadata"]["name"]: o for o in self._list(A.STORAGE_API, A.RV)}
        rvas = self._list(A.STORAGE_API, A.RVA)
        rvrs = self._list(A.STORAGE_API, A.RVR)
        # RVAs: attach at once (Attached, ReplicaReady, Ready)
        attached: dict[str, list[str]] = {}
        for a in _alive(rvas):
            rv, node = a["spec"]["replicatedVolumeName"], a["spec"]["nodeName"]
            if rv not in rvs:
                continue
            attached.setdefault(rv, []).append(node)
            if (a.get("status") or {}).get("phase") != A.RVA_ATTACHED:
                conds = [_cond(A.COND_ATTACHED, A.R_ATTACHED), _cond(A.COND_REPLICA_READY, A.R_READY)]
                conds.append(_cond(A.COND_READY, A.R_READY))
                patch_status(
                    self.pg,
                    A.STORAGE_API,
                    A.RVA,
                    None,
                    a["metadata"]["name"],
                    {"phase": A.RVA_ATTACHED, "conditions": conds},
                )
                self._did("rva-attached")
        # RVs: replicas, a DRBD port, IOReady and Quorum True, actuallyAttachedTo
        for name, rv in rvs.items():
            if rv["metadata"].get("deletionTimestamp"):
                continue
            status = rv.get("status") or {}
            want: dict[str, Any] = {"actuallyAttachedTo": sorted(attached.get(name, []))[:2]}
            if not status.get("conditions"):
                want["conditions"] = [
                    _cond(A.COND_IO_READY, A.R_IO_READY),
                    _cond(A.COND_QUORUM, A.R_QUORUM_REACHED),
                ]
                want["drbdPort"] = drbd_port(name)
                self._did("rv-ready")
                self._ready_at[name] = time.monotonic()
                if self.incident and self.victim is None:
                    self.victim = name
            elif name == self.victim:
                want["conditions"] = self._victim_conditions(status["conditions"], self._ready_at[name])
            if any(status.get(k) != v for k, v in want.items()):
                patch_status(self.pg, A.STORAGE_API, A.RV, None, name, want)
            have = {r["metadata"]["name"] for r in rvrs}
            for i, node in enumerate(self._placement(name)):
                if f"{name}-{i}" not in have:
                    self.pg.create(
                        ADMIN,
                        {
                            "apiVersion": A.STORAGE_API,
                            "kind": A.RVR,
                            "metadata": {"name": f"{name}-{i}", "labels": {A.RV_LABEL: name}},
                            "spec": {"replicatedVolumeName": name, "nodeName": node, "type": A.DISKFUL},
                        },
                    )
                    self._did("rvr-created")
        # garbage collection (no controller-manager): replicas and attachments of deleted RVs
        for kind, objs in ((A.RVR, rvrs), (A.RVA, rvas)):
            for o in objs:
                if o["spec"]["replicatedVolumeName"] not in rvs:
                    self.pg.delete(ADMIN, A.STORAGE_API, kind, None, o["metadata"]["name"])
                    self._did(f"{kind.lower()}-collected")
        # Jobs complete after the sleep / timeout of their script (there is no job controller and
        # no kubelet); iptables rules of the losses Jobs are kept per node, as a host would
        for j in _alive(self._list("batch/v1", "Job", JOB_NS)):
            meta = j["metadata"]
            if (j.get("status") or {}).get("succeeded"):
                continue
            script = "\n".join(j["spec"]["template"]["spec"]["containers"][0].get("args") or [])
            first = self._job_seen.setdefault(meta["uid"], time.monotonic())
            m = re.search(r"\bsleep (\d+)|\btimeout (\d+)s", script)
            if m and time.monotonic() - first < int(m.group(1) or m.group(2)):
                continue
            t = now_ts()
            patch_status(
                self.pg,
                "batch/v1",
                "Job",
                JOB_NS,
                meta["name"],
                {
                    "startTime": t,
                    "completionTime": t,
                    "succeeded": 1,
                    "conditions": [
                        {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": t},
                        {"type": "Complete", "status": "True", "lastTransitionTime": t},
                    ],
                },
            )
            self._did("job-completed")
            node = j["spec"]["template"]["spec"]["nodeName"]
            with self.lock:
                rules = self.iptables.setdefault(node, set())
                if add := re.search(r'iptables -A INPUT .* --comment "([^"]+)"', script):
                    rules.add(add.group(1))
                if (rm := re.search(r'COMMENT="([^"]+)"', script)) and "iptables -D INPUT" in script:
                    rules.discard(rm.group(1))
        # VirtualMachineOperations complete
        for op in _alive(self._list(A.VIRT_API, A.VMOP, self.vm_ns)):
            if (op.get("status") or {}).get("phase") != "Completed":
                patch_status(
                    self.pg, A.VIRT_API, A.VMOP, self.vm_ns, op["metadata"]["name"], {"phase": "Completed"}
                )
                self._did("vmop-completed")
        # the control plane: 2 agents and 2 controllers (a DaemonSet/Deployment would recreate them)
        pods = _alive(self._list("v1", "Pod", A.CONTROL_PLANE_NAMESPACE))
        for app in (A.AGENT_APP, A.CONTROLLER_APP):
            have_pods = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == app]
            for _ in range(2 - len(have_pods)):
                self.pg.create(ADMIN, control_plane_pod(app))
                self._did(f"pod-{app}-created")

    def _victim_conditions(self, conds: list[dict[str, Any]], ready_at: float) -> list[dict[str, Any]]:
        """1s after ready: Quorum False (flap) or IOReady False (break); flap: True again at 2s."""
        age = time.monotonic() - ready_at
        if self.incident == "flap":
            ctype, ok = A.COND_QUORUM, not 1.0 <= age < 2.0
            reason = A.R_QUORUM_REACHED if ok else A.R_QUORUM_LOST
        else:
            ctype, ok, reason = A.COND_IO_READY, age < 1.0, A.R_IO_READY if age < 1.0 else A.R_NO_IO_READY
        out = []
        for c in conds:
            if c["type"] == ctype and (c["status"] == "True") != ok:
                self._did(f"{ctype}-{ok}")
                out.append({**c, "status": str(ok), "reason": reason, "lastTransitionTime": now_ts()})
            else:
                out.append(c)
        return out

    @staticmethod
    def _placement(rv: str) -> list[str]:
        start = int(hashlib.sha1(rv.encode()).hexdigest(), 16) % len(STORAGE_NODES)
        return [STORAGE_NODES[(start + i) % len(STORAGE_NODES)] for i in range(3)]


def control_plane_pod(app: str) -> dict[str, Any]:
    prefix = A.AGENT_POD_PREFIX if app == A.AGENT_APP else A.CONTROLLER_POD_PREFIX
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": prefix + uuid.uuid4().hex[:5],
            "namespace": A.CONTROL_PLANE_NAMESPACE,
            "labels": {"app": app},
        },
        # no nodeName: without a kubelet a bound pod would never finish terminating
        "spec": {"containers": [{"name": app, "image": "registry.invalid/sds-replicated-volume:test"}]},
    }


@dataclass
class Seen:
    """Objects announced by watches during a run (ADDED events, their first state)."""

    added: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    deleted: dict[str, list[str]] = field(default_factory=dict)
    added_at: dict[str, float] = field(default_factory=dict)  # kind/name -> last ADDED (monotonic)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def callback(self, kind: str) -> Callable[[str, dict[str, Any]], None]:
        def cb(event_type: str, obj: dict[str, Any]) -> None:
            with self.lock:
                if event_type == "ADDED":
                    self.added.setdefault(kind, []).append(copy.deepcopy(obj))
                    self.added_at[f"{kind}/{obj['metadata']['name']}"] = time.monotonic()
                elif event_type == "DELETED":
                    self.deleted.setdefault(kind, []).append(obj["metadata"]["name"])

        return cb

    def of(self, kind: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.added.get(kind, []))


@dataclass
class World:
    kube: KubeAPIServer
    pg: KubePlayground
    vm_ns: str
    test_kubeconfig: Path
    parent_kubeconfig: Path
    ips: dict[str, str]


def _crd_established(pg: KubePlayground, name: str) -> None:
    got = pg.get(ADMIN, "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, name)
    conds = ((got or {}).get("status") or {}).get("conditions") or []
    assert any(c["type"] == "Established" and c["status"] == "True" for c in conds), conds


def parent_rbac(vm_ns: str) -> list[dict[str, Any]]:
    """The parent user may only use the VM kinds and Cilium policies in the VM namespace."""
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "megatest-chaos", "namespace": vm_ns},
            "rules": [
                {
                    "apiGroups": [A.VIRT_GROUP],
                    "resources": ["virtualmachines", "virtualmachineoperations"],
                    "verbs": ["get", "list", "watch", "create", "delete"],
                },
                {
                    "apiGroups": [A.CILIUM_GROUP],
                    "resources": ["ciliumnetworkpolicies"],
                    "verbs": ["get", "list", "watch", "create", "delete"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "megatest-chaos", "namespace": vm_ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "megatest-chaos"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": PARENT_USER}],
        },
    ]


@pytest.fixture(scope="module")
def world(kube: KubeAPIServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    pg = KubePlayground({ADMIN: ClusterConfig(kubeconfig=kube.kubeconfig)})
    vm_ns = f"e2e-sds-test-cluster-{uuid.uuid4().hex[:6]}"
    crds = A.storage_crds() + A.parent_crds()
    for crd in crds:
        pg.create(ADMIN, crd)
    for crd in crds:
        name = str(crd["metadata"]["name"])
        eventually(functools.partial(_crd_established, pg, name))
    for ns in (vm_ns, A.CONTROL_PLANE_NAMESPACE):
        pg.create(ADMIN, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in parent_rbac(vm_ns):
        pg.create(ADMIN, obj)
    ips: dict[str, str] = {}
    for i, node in enumerate(STORAGE_NODES):
        ips[node] = f"10.211.1.{47 + i}"
        labels = {A.HOSTNAME_LABEL: node, A.STORAGE_NODE_LABEL: ""}
        pg.create(ADMIN, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": labels}})
        vm = {
            "apiVersion": A.VIRT_API,
            "kind": A.VM,
            "metadata": {"name": node, "namespace": vm_ns},
            "spec": {"runPolicy": "AlwaysOn", "virtualMachineClassName": "generic"},
        }
        eventually(functools.partial(pg.create, ADMIN, vm))  # the CRD's REST mapping may lag behind
        patch_status(pg, A.VIRT_API, A.VM, vm_ns, node, {"phase": "Running", "ipAddress": ips[node]})
    # a VM that is not Running (and has no IP): megatest must never pick it
    pg.create(
        ADMIN, {"apiVersion": A.VIRT_API, "kind": A.VM, "metadata": {"name": "master-0", "namespace": vm_ns}}
    )
    patch_status(pg, A.VIRT_API, A.VM, vm_ns, "master-0", {"phase": "Stopped"})
    for sc in STORAGE_CLASSES:
        pg.create(
            ADMIN,
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RSC,
                "metadata": {"name": sc},
                "spec": {"replication": "Availability", "topology": "Ignored", "storagePool": "test"},
            },
        )
    d = tmp_path_factory.mktemp("megatest-kube")
    test_kc = d / "test.kubeconfig"
    test_kc.write_bytes(Path(kube.kubeconfig).read_bytes())
    parent_kc = d / "parent.kubeconfig"
    parent_kc.write_bytes(kube.user_kubeconfig(PARENT_USER).read_bytes())
    yield World(kube, pg, vm_ns, test_kc, parent_kc, ips)
    # the API server is shared by the session: remove what others could trip over (namespaces
    # stay: without a namespace controller they would never finish terminating)
    for p in pg.list(ADMIN, "v1", "Pod", A.CONTROL_PLANE_NAMESPACE):
        pg.delete(ADMIN, "v1", "Pod", A.CONTROL_PLANE_NAMESPACE, p["metadata"]["name"])
    for node in STORAGE_NODES:
        pg.delete(ADMIN, "v1", "Node", None, node)
    for crd in crds:  # and every object of these kinds
        pg.delete(ADMIN, "apiextensions.k8s.io/v1", "CustomResourceDefinition", None, crd["metadata"]["name"])
    pg.close()


@pytest.fixture
def controllers(world: World) -> Iterator[MiniControllers]:
    mc = MiniControllers(world.pg, world.vm_ns)
    mc.reconcile()  # the control-plane pods exist before the run
    mc.start()
    yield mc
    mc.stop()
    assert not mc.errors, mc.errors[:5]


@pytest.fixture
def seen(world: World) -> Iterator[Seen]:
    s = Seen()
    subs = [
        world.pg.watch(ADMIN, A.CILIUM_API, A.CNP, world.vm_ns, s.callback(A.CNP)),
        world.pg.watch(ADMIN, "batch/v1", "Job", JOB_NS, s.callback("Job")),
        world.pg.watch(ADMIN, A.VIRT_API, A.VMOP, world.vm_ns, s.callback(A.VMOP)),
        world.pg.watch(ADMIN, A.STORAGE_API, A.RV, None, s.callback(A.RV)),
        world.pg.watch(ADMIN, A.STORAGE_API, A.RVA, None, s.callback(A.RVA)),
    ]
    time.sleep(0.5)  # watches established
    yield s
    for sub in subs:
        sub.stop()


def megatest_argv(world: World, *flags: str, duration: str, seed: int = 7) -> list[str]:
    return [
        sys.executable,
        "-m",
        "engine.cli",
        "megatest",
        "--kubeconfig",
        str(world.test_kubeconfig),
        "--parent-kubeconfig",
        str(world.parent_kubeconfig),
        "--vm-namespace",
        world.vm_ns,
        "--storage-classes",
        ",".join(STORAGE_CLASSES),
        "--duration",
        duration,
        "--seed",
        str(seed),
        "--report",
        "json",
        "--log-format",
        "json",
        *flags,
    ]


ALL_ENABLED = [
    "--enable-pod-destroyer",
    "--enable-volume-resizer",
    "--enable-volume-replica-destroyer",
    "--enable-volume-replica-creator",
    "--enable-chaos-network-block",
    "--enable-chaos-network-degrade",
    "--enable-chaos-vm-reboot",
]

FAST = [
    "--max-volumes", "4",
    "--volume-step-min", "1",
    "--volume-step-max", "2",
    "--step-period-min", "2s",
    "--step-period-max", "4s",
    "--volume-period-min", "6s",
    "--volume-period-max", "12s",
    "--chaos-period-min", "1s",
    "--chaos-period-max", "2s",
    "--chaos-incident-min", "2s",
    "--chaos-incident-max", "3s",
    "--chaos-loss-percent", "0.05",
]  # fmt: skip


def leftovers(world: World) -> dict[str, list[str]]:
    pg = world.pg

    def names(api: str, kind: str, ns: str | None = None) -> list[str]:
        return sorted(o["metadata"]["name"] for o in pg.list(ADMIN, api, kind, ns))

    return {
        k: v
        for k, v in {
            "CiliumNetworkPolicy": names(A.CILIUM_API, A.CNP, world.vm_ns),
            "Job": names("batch/v1", "Job"),
            "ReplicatedVolume": names(A.STORAGE_API, A.RV),
            "ReplicatedVolumeAttachment": names(A.STORAGE_API, A.RVA),
        }.items()
        if v
    }


def test_megatest_runs_end_to_end_on_a_real_api_server(
    world: World, controllers: MiniControllers, seen: Seen, tmp_path: Path
) -> None:
    controllers.incident = "flap"  # one RV loses Quorum for a second and regains it: still held
    t0 = time.monotonic()
    res = subprocess.run(
        megatest_argv(world, *ALL_ENABLED, *FAST, duration="30s"),
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    wall = time.monotonic() - t0
    (tmp_path / "megatest.log").write_text(res.stderr)
    assert res.returncode == 0, res.stderr[-4000:] + res.stdout[-2000:]
    assert "Traceback" not in res.stderr
    report = json.loads(res.stdout)
    # nothing of the run is left: policies, Jobs, volumes, attachments, iptables rules
    assert leftovers(world) == {}
    assert controllers.rules() == {}

    assert report["phase"] == "Succeed", report["message"]
    assert report["message"] == "workflow deadline 30s exceeded"
    rvs = {o["metadata"]["name"] for o in seen.of(A.RV)}
    assert report["rvsCreated"] == report["rvsDeleted"] == len(rvs) >= 3
    assert set(report["volumes"]) == rvs
    assert report["brokenRVs"] == [] and report["cleanupFailures"] == []
    for name, v in report["volumes"].items():
        assert (v["created"], v["deleted"], v["checked"], v["verdict"]) == (True, True, True, "held"), name
        flaps = 2 if name == controllers.victim else 0  # the checker's watch saw False, then True
        assert v["transitions"] == {"IOReady": 0, "Quorum": flaps}, name
        assert v["storageClass"] in STORAGE_CLASSES
    actions = report["actions"]
    assert {k: a["errors"] for k, a in actions.items() if a["errors"]} == {}
    assert actions["volume-create-rv"]["count"] == len(rvs)
    # once at the end of the lifetime, once more (a no-op then) by volume-main's exit handler
    assert len(rvs) <= actions["volume-delete-rv"]["count"] <= 2 * len(rvs)
    assert actions["chaos-cleanup-policies"]["count"] == actions["chaos-cleanup-jobs"]["count"] == 1
    rva_creates = sum(
        a["count"]
        for k, a in actions.items()
        if k.startswith(("volume-initial-rva-", "volume-attacher-publish"))
    )
    assert len(seen.of(A.RVA)) == rva_creates

    incidents = report["incidents"]
    assert set(incidents) <= {"blocking-everything", "blocking-drbd", "split-brain", "losses", "latency"}
    blocks = sum(incidents.get(k, 0) for k in ("blocking-everything", "blocking-drbd", "split-brain"))
    degrades = incidents.get("losses", 0) + incidents.get("latency", 0)
    assert blocks >= 2 and degrades >= 2, incidents
    # the VM reboots wait rand(5m, 6m) when the period is under 5 minutes (the seed): none in 30s
    assert "chaos-vm-reboot" not in actions and seen.of(A.VMOP) == []

    cnps, jobs = seen.of(A.CNP), seen.of("Job")
    check_policies(world, cnps, rvs)
    check_jobs(world, jobs)
    assert sum(n.startswith("deny-all-tcp-") for n in names(cnps)) == incidents.get("blocking-everything", 0)
    assert sum(n.startswith("split-brain-") for n in names(cnps)) == 2 * incidents.get("split-brain", 0)
    assert sum(n.startswith("deny-drbd-") for n in names(cnps)) <= 2 * incidents.get("blocking-drbd", 0)
    assert sum(n.endswith("-add-iptables") for n in names(jobs)) == 2 * incidents.get("losses", 0)
    cleanup = [j for j in jobs if (j["metadata"].get("labels") or {}).get(CLEANUP_LABEL)]
    assert sum(n.endswith("-del-iptables") for n in names(jobs)) == 2 * incidents.get("losses", 0) + len(
        cleanup
    )
    assert len(cleanup) in (0, 2)  # a losses incident stopped by --duration before its del Jobs ran
    assert sum(n.endswith("-iperf3") for n in names(jobs)) == 2 * incidents.get("latency", 0)
    print(
        f"\nmegatest on a real API server: {wall:.1f}s wall; RVs {len(rvs)}, RVAs {len(seen.of(A.RVA))}, "
        f"CiliumNetworkPolicies {len(cnps)}, Jobs {len(jobs)} ({len(cleanup)} iptables cleanup); "
        f"incidents {incidents}; "
        f"mini-controllers {controllers.done}"
    )


def names(objs: list[dict[str, Any]]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def seed_examples() -> dict[str, dict[str, Any]]:
    docs = yaml.safe_load_all((FIXTURES / "seed-examples.yaml").read_text())
    return {d["kind"] + "/" + d["metadata"]["name"]: d for d in docs}


def project(actual: Any, like: Any) -> Any:
    """``actual`` restricted to the keys of ``like`` (server defaults and metadata dropped)."""
    if isinstance(like, dict) and isinstance(actual, dict):
        return {k: project(actual[k], v) for k, v in like.items() if k in actual}
    if isinstance(like, list) and isinstance(actual, list) and len(like) == len(actual):
        return [project(a, b) for a, b in zip(actual, like, strict=True)]
    return actual


def expected_cnp(
    name: str, ns: str, a: list[str], b: list[str], ports: list[dict[str, Any]]
) -> dict[str, Any]:
    """The seed's one-port example (allow host, remote-node and the namespace; deny ``ports``
    between the VMs) with its name, namespace, VMs and ports substituted."""
    exp = copy.deepcopy(seed_examples()["CiliumNetworkPolicy/deny-5201-only-between-worker-01-and-worker-10"])
    exp["metadata"] = {"name": name, "namespace": ns}
    spec = exp["spec"]
    spec["endpointSelector"]["matchExpressions"][0]["values"] = a
    for rule in spec["ingress"] + spec["egress"]:
        for sel in rule.get("fromEndpoints", []) + rule.get("toEndpoints", []):
            sel["matchLabels"]["io.kubernetes.pod.namespace"] = ns
    for key, peers in (("ingressDeny", "fromEndpoints"), ("egressDeny", "toEndpoints")):
        spec[key][0][peers][0]["matchExpressions"][0]["values"] = b
        spec[key][0]["toPorts"][0]["ports"] = ports
    return exp


def drbd_port(rv: str) -> int:
    """The port MiniControllers gives an RV (status.drbdPort, as the sim)."""
    return 7000 + int(hashlib.sha1(rv.encode()).hexdigest(), 16) % 1000


def check_policies(world: World, cnps: list[dict[str, Any]], rvs: set[str]) -> None:
    """Every CiliumNetworkPolicy is the seed's, for the VMs and ports of its variant. The seed's
    two examples differ: the all-TCP one omits the ``fromEntities``/``toEntities`` host and
    remote-node rules of the one-port example; megatest always keeps them, as the seed's text
    requires ("оставляя трафик между родительским кластером и вложенным"), so both variants are
    compared with the one-port example's structure and the all-TCP example's ports."""
    running = sorted(STORAGE_NODES)  # master-0 is Stopped: never picked
    all_tcp = seed_examples()["CiliumNetworkPolicy/deny-all-tcp-between-worker-01-and-worker-10"]
    tcp_ports = all_tcp["spec"]["ingressDeny"][0]["toPorts"][0]["ports"]
    assert tcp_ports == [{"port": "1", "endPort": 65535, "protocol": "TCP"}]
    drbd_ports = {drbd_port(rv) for rv in rvs}
    for p in cnps:
        name, spec = p["metadata"]["name"], p["spec"]
        a = spec["endpointSelector"]["matchExpressions"][0]["values"]
        b = spec["ingressDeny"][0]["fromEndpoints"][0]["matchExpressions"][0]["values"]
        ports = spec["ingressDeny"][0]["toPorts"][0]["ports"]
        assert p["metadata"]["labels"][LABEL_WORKFLOW] == "megatest"
        got = {
            "apiVersion": p["apiVersion"],
            "kind": p["kind"],
            "metadata": {"name": name, "namespace": p["metadata"]["namespace"]},
            "spec": spec,
        }
        assert got == expected_cnp(name, world.vm_ns, a, b, ports), name
        if name.startswith("deny-all-tcp-between-"):  # blocking-everything: two VMs, all TCP
            assert a == b and len(a) == 2 and set(a) <= set(running)
            assert name == f"deny-all-tcp-between-{a[0]}-and-{a[1]}" and ports == tcp_ports
        elif name.startswith("split-brain-"):  # two halves (group size 0), all TCP between them
            assert sorted(a + b) == running and len(a) == len(b) == 2 and ports == tcp_ports
        else:  # blocking-drbd: a random pair of the DRBD ports of the first VM's volumes
            assert name.startswith("deny-drbd-"), name
            vm = a[0] if len(a) == 1 else b[0]
            assert sorted({vm, *a, *b}) == running and len(ports) in (1, 2)
            assert all(x["protocol"] == "TCP" and int(x["port"]) in drbd_ports for x in ports)


def del_script(node: str, sleep: int | None) -> str:
    """The seed's del-iptables commands (``sleep`` None: our immediate cleanup Job)."""
    return (
        "set -e\n" + (f"sleep {sleep}\n" if sleep is not None else "") + f'COMMENT="{node}-add-iptables"\n'
        'while iptables -L INPUT --line-numbers | grep -q "$COMMENT"; do\n'
        '  iptables -D INPUT $(iptables -L INPUT --line-numbers | grep -F "$COMMENT" | head -n1'
        " | awk '{print $1}')\n"
        "done\n"
    )


def check_jobs(world: World, jobs: list[dict[str, Any]], incident_range: tuple[int, int] = (2, 3)) -> None:
    """Every Job is the seed's example Job with the seed's commands for its variant; a losses
    incident stopped before its del-iptables Job succeeded has that Job replaced by an immediate
    one (labelled CLEANUP_LABEL, activeDeadlineSeconds 120, kept 1h after it finished)."""
    seed_job = seed_examples()["Job/worker-01-del-iptables"]
    by_incident: dict[str, list[dict[str, Any]]] = {}
    for j in jobs:
        by_incident.setdefault(j["metadata"]["labels"][LABEL_NODE], []).append(j)
    for incident, js in by_incident.items():
        nodes = sorted({j["spec"]["template"]["spec"]["nodeName"] for j in js})
        assert len(nodes) == 2 and set(nodes) <= set(STORAGE_NODES), incident
        lifetimes = set()
        for j in js:
            script = j["spec"]["template"]["spec"]["containers"][0]["args"][0]
            if m := re.search(r"^sleep (\d+)$|^timeout (\d+)s ", script, re.M):
                lifetimes.add(int(m.group(1) or m.group(2)))
        assert len(lifetimes) == 1, (incident, lifetimes)
        lifetime = lifetimes.pop()
        assert incident_range[0] <= lifetime <= incident_range[1]  # --chaos-incident-min/max
        for j in js:
            name = j["metadata"]["name"]
            node = j["spec"]["template"]["spec"]["nodeName"]
            peer_ip = world.ips[next(n for n in nodes if n != node)]
            cleanup = (j["metadata"].get("labels") or {}).get(CLEANUP_LABEL) == "true"
            if cleanup:
                assert name == f"{node}-del-iptables"
                script = del_script(node, None)
            elif name == f"{node}-add-iptables":
                script = (
                    "set -e\n"
                    f"iptables -A INPUT -s {peer_ip} -m statistic --mode random --probability 0.05 -j DROP "
                    f'-m comment --comment "{node}-add-iptables"\n'
                    'echo "iptables rule added"\n'
                )
            elif name == f"{node}-del-iptables":
                script = del_script(node, lifetime)
            else:
                assert name == f"{node}-iperf3", name
                script = (
                    "set -e\n"
                    f"timeout {lifetime}s sh -c '\n"
                    "  iperf3 -s -D || true\n"
                    "  while true;do\n"
                    f"    iperf3 -c {peer_ip} -t 60 -i 30 || true\n"
                    "    sleep 0.5\n"
                    " done\n"
                    "' || true\n"
                )
            exp = copy.deepcopy(seed_job)
            exp["metadata"] = {"name": name, "namespace": JOB_NS}
            exp["spec"]["ttlSecondsAfterFinished"] = lifetime + 4  # the seed: incident_lifetime + 4
            exp["spec"]["activeDeadlineSeconds"] = lifetime + 2  # the seed: incident_lifetime + 2
            exp["spec"]["template"]["spec"]["nodeName"] = node
            exp["spec"]["template"]["spec"]["containers"][0]["args"] = [script]
            if cleanup:
                exp["spec"]["ttlSecondsAfterFinished"], exp["spec"]["activeDeadlineSeconds"] = 3600, 120
            assert project(j, exp) == exp, name


def test_megatest_reports_a_broken_volume_with_exit_1(
    world: World, controllers: MiniControllers, seen: Seen
) -> None:
    """The first RV loses IOReady for good: the checker's watch counts one transition (odd =
    broken), the run still tears everything down, and exits 1."""
    controllers.incident = "break"
    flags = ["--max-volumes", "2", "--step-period-min", "2s", "--step-period-max", "3s"]
    flags += ["--volume-period-min", "4s", "--volume-period-max", "5s"]
    argv = megatest_argv(world, *flags, duration="10s")
    res = subprocess.run(argv, check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr
    report = json.loads(res.stdout)
    victim = controllers.victim
    assert victim is not None and report["brokenRVs"] == [victim]
    v = report["volumes"][victim]
    assert (v["transitions"], v["verdict"], v["deleted"]) == (
        {"IOReady": 1, "Quorum": 0},
        "broken: IOReady",
        True,
    )
    assert report["phase"] == "Succeed" and report["cleanupFailures"] == []
    assert leftovers(world) == {}


def _active(seen: Seen, kind: str, suffix: str = "") -> list[str]:
    with seen.lock:
        added = [o["metadata"]["name"] for o in seen.added.get(kind, [])]
        gone = list(seen.deleted.get(kind, []))
    for n in gone:
        if n in added:
            added.remove(n)
    return [n for n in added if n.endswith(suffix)]


@pytest.mark.parametrize(
    ("signum", "times"),
    [(signal.SIGTERM, 1), (signal.SIGINT, 1), (signal.SIGTERM, 2)],
    ids=["SIGTERM", "SIGINT", "SIGTERM-twice"],
)
def test_megatest_interrupted_recovers_the_chaos(
    world: World, controllers: MiniControllers, seen: Seen, tmp_path: Path, signum: signal.Signals, times: int
) -> None:
    """A signal mid-incident: the run is aborted, volumes are torn down, policies and Jobs are
    deleted, and the iptables rule of the interrupted losses incident is removed by a Job. A
    second signal terminates: volume teardown (an exit handler) is skipped, chaos still recovered."""
    flags = [*FAST, "--volume-period-min", "2m", "--volume-period-max", "3m"]
    flags += ["--chaos-incident-min", "4s", "--chaos-incident-max", "5s"]
    log = (tmp_path / "megatest.log").open("w")
    proc = subprocess.Popen(
        megatest_argv(world, *ALL_ENABLED, *flags, duration="5m", seed=3),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    try:

        def mid_incident() -> None:
            assert proc.poll() is None
            assert _active(seen, A.CNP) and _active(seen, A.RV)
            # a losses incident that began less than 1.5s ago (it lasts 4-5s): its rules are in place
            adds = _active(seen, "Job", "-add-iptables")
            assert adds and all(time.monotonic() - seen.added_at[f"Job/{n}"] < 1.5 for n in adds)
            assert sorted(c for cs in controllers.rules().values() for c in cs) == sorted(adds)

        eventually(
            mid_incident, timeout=60, interval=0.05
        )  # losses is one of two degrade variants: P(none) ~ 0.2%
        rules = controllers.rules()
        active = {"cnp": _active(seen, A.CNP), "rv": _active(seen, A.RV), "rules": rules}
        for i in range(times):
            time.sleep(0.05 * i)
            proc.send_signal(signum)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:  # the test failed: still leave nothing behind for the next ones
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
    stderr = (tmp_path / "megatest.log").read_text()
    assert "Traceback" not in stderr
    assert proc.returncode == 1, stderr[-3000:]
    report = json.loads(out)
    assert (report["phase"], report["message"]) == ("Failed", f"interrupted by {signum.name}"), stderr[-3000:]
    assert f"megatest interrupted by {signum.name}" in stderr
    # nothing is left: the policies, Jobs, RVs and RVAs that were active, and the iptables rules
    left = leftovers(world)
    assert controllers.rules() == {}, active
    if times == 1:
        assert left == {}, active
        assert report["cleanupFailures"] == [] and report["rvsCreated"] == report["rvsDeleted"] >= 1
    else:  # terminated: chaos recovered, volumes may be left (deleted here for the next tests)
        assert "terminating (exit handlers skipped, chaos still recovered)" in stderr
        assert set(left) <= {"ReplicatedVolume", "ReplicatedVolumeAttachment"}, left
        for kind in (A.RVA, A.RV):
            for o in world.pg.list(ADMIN, A.STORAGE_API, kind):
                world.pg.delete(ADMIN, A.STORAGE_API, kind, None, o["metadata"]["name"])
        print(f"\nterminated: left {left}")
    # the interrupted losses incident: its del-iptables Jobs were replaced by immediate ones
    cleanup = [j for j in seen.of("Job") if (j["metadata"].get("labels") or {}).get(CLEANUP_LABEL)]
    in_place = [c for cs in rules.values() for c in cs]  # "<node>-add-iptables"
    assert sorted(names(cleanup)) == sorted(c.replace("-add-", "-del-") for c in in_place), (
        active,
        names(seen.of("Job")),
    )
    check_jobs(world, seen.of("Job"), (4, 5))
    check_policies(world, seen.of(A.CNP), {o["metadata"]["name"] for o in seen.of(A.RV)})
    print(f"\n{signum.name}: active at the signal {active}; cleanup Jobs {names(cleanup)}")


@pytest.mark.parametrize(
    "case",
    [
        "no-parent-cluster",
        "no-vm-namespace",
        "unknown-storage-class",
        "forbidden-vm-namespace",
        "bad-kubeconfig",
    ],
)
def test_megatest_invalid_real_cluster_flags(world: World, case: str) -> None:
    """Exit 2 with one "megatest: ..." line per problem, no traceback, nothing created."""
    argv = megatest_argv(world, "--enable-chaos-network-block", "--enable-chaos-vm-reboot", duration="1m")
    i = argv.index("--parent-kubeconfig")
    if case == "no-parent-cluster":
        del argv[i : i + 4]  # --parent-kubeconfig P --vm-namespace NS
        expected = [
            "megatest: chaos goroutines on a real cluster need --parent-kubeconfig (the DVP parent cluster)",
            "megatest: chaos goroutines on a real cluster need --vm-namespace (the namespace of the VMs)",
        ]
    elif case == "no-vm-namespace":
        del argv[i + 2 : i + 4]
        expected = [
            "megatest: chaos goroutines on a real cluster need --vm-namespace (the namespace of the VMs)"
        ]
    elif case == "unknown-storage-class":
        argv[argv.index("--storage-classes") + 1] = "mt-r2,nope"
        expected = [
            "megatest: --storage-classes: no ReplicatedStorageClass nope on the cluster (known: mt-r2, mt-r3)"
        ]
    elif case == "forbidden-vm-namespace":  # the parent user may only read the VM namespace
        argv[i + 3] = "kube-system"
        expected = ["megatest: --parent-kubeconfig: "]
    else:
        argv[argv.index("--kubeconfig") + 1] = str(world.test_kubeconfig) + ".missing"
        expected = ["megatest: --kubeconfig: "]
    res = subprocess.run(argv, check=False, cwd=REPO, capture_output=True, text=True, timeout=60)
    lines = [x for x in res.stderr.strip().splitlines() if not x.startswith("{")]  # no JSON log lines
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    assert len(lines) == len(expected) and all(
        line.startswith(e) if e.endswith(": ") else line == e for line, e in zip(lines, expected, strict=True)
    ), lines
    if case == "forbidden-vm-namespace":
        assert "Forbidden" in lines[0] and "virtualmachines" in lines[0]
    assert leftovers(world) == {}


def test_megatest_actors_on_a_real_api_server(world: World) -> None:
    """The actors a 90-second run does not reach (attacher cycles wait 30-60s, replica chaos
    30-300s, VM reboots 5-6 minutes, pod destroyers 30-60s), called as the engine calls them, on
    the "test" and "parent" kubeconfigs."""
    from actors.chaos.pod_kill import PodKill
    from actors.chaos_registry import ChaosContext
    from actors.megatest import ACTORS

    pg = KubePlayground(
        {
            "test": ClusterConfig(kubeconfig=world.test_kubeconfig),
            "parent": ClusterConfig(kubeconfig=world.parent_kubeconfig),
        }
    )

    def ctx(cluster: str, name: str, seed: int = 1) -> ChaosContext:
        labels = {LABEL_WORKFLOW: "megatest", LABEL_NODE: name}
        return ChaosContext("megatest", "default", name, name, cluster, labels, seed)

    mc = MiniControllers(world.pg, world.vm_ns)
    rv = f"mt-actors-{uuid.uuid4().hex[:4]}"
    try:
        pg.create(
            "test",
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RV,
                "metadata": {"name": rv},
                "spec": {"size": "1Gi", "replicatedStorageClassName": "mt-r2"},
            },
        )
        mc.reconcile()  # replicas, port, conditions, control-plane pods
        # volume-attacher's plan: storage nodes, the RV's active RVAs
        c = ctx("test", "plan")
        assert ACTORS["megatest-attach-plan"].inject(pg, {"rv": rv}, c) == []
        assert (c.outputs["count"], sorted(c.outputs["shuffled"])) == (0, STORAGE_NODES)
        wanted = c.outputs["wanted"]
        pg.create(
            "test",
            {
                "apiVersion": A.STORAGE_API,
                "kind": A.RVA,
                "metadata": {"name": f"rva-{rv}-{wanted}"},
                "spec": {"replicatedVolumeName": rv, "nodeName": wanted},
            },
        )
        c = ctx("test", "plan")
        ACTORS["megatest-attach-plan"].inject(pg, {"rv": rv}, c)
        assert (c.outputs["count"], c.outputs["wantedAttached"], c.outputs["victim"]) == (1, True, wanted)
        # volume-replica-destroyer / -creator / -resizer
        c = ctx("test", "destroy")
        ACTORS["megatest-rvr-destroy"].inject(pg, {"rv": rv}, c)
        assert pg.get("test", A.STORAGE_API, A.RVR, None, c.outputs["rvr"]) is None
        c = ctx("test", "create")
        ACTORS["megatest-rvr-create"].inject(pg, {"rv": rv, "type": "TieBreaker"}, c)
        rvr = pg.get("test", A.STORAGE_API, A.RVR, None, c.outputs["rvr"])
        assert rvr is not None and rvr["spec"] == {"replicatedVolumeName": rv, "type": "TieBreaker"}
        c = ctx("test", "resize")
        ACTORS["megatest-rv-resize"].inject(pg, {"rv": rv, "stepMin": 4096, "stepMax": 65536}, c)
        got = pg.get("test", A.STORAGE_API, A.RV, None, rv)
        assert got is not None and got["spec"]["size"] == str(1024**3 + c.outputs["step"])
        # pod-destroyer: control-plane pods by label
        c = ctx("test", "kill")
        PodKill().inject(
            pg, {"namespace": A.CONTROL_PLANE_NAMESPACE, "selector": {"app": "agent"}, "count": 2}, c
        )
        assert len(c.outputs["killed"]) == 2
        assert not [
            p
            for p in pg.list("test", "v1", "Pod", A.CONTROL_PLANE_NAMESPACE, "app=agent")
            if p["metadata"]["name"] in c.outputs["killed"]
        ]
        # chaos-vm-reboter: the seed's VMOP; a VM with an unfinished VMOP is skipped
        c = ctx("parent", "reboot")
        ACTORS["megatest-vm-reboot"].inject(pg, {"vmNamespace": world.vm_ns}, c)
        vm, op_name = c.outputs["vm"], c.outputs["vmop"]
        assert vm in STORAGE_NODES and re.fullmatch(r"megatest-chaos-restart-[a-z0-9]{5}", op_name)
        op = pg.get("parent", A.VIRT_API, A.VMOP, world.vm_ns, op_name)
        assert op is not None
        exp = copy.deepcopy(seed_examples()["VirtualMachineOperation/megatest-chaos-restart-zsz9c"])
        exp["metadata"] = {"name": op_name, "namespace": world.vm_ns}
        exp["spec"]["virtualMachineName"] = vm
        assert project(op, exp) == exp
        again = ctx("parent", "reboot-again")
        again.seed, again.name = c.seed, c.name  # the same draw: the same VM
        ACTORS["megatest-vm-reboot"].inject(pg, {"vmNamespace": world.vm_ns}, again)
        assert again.outputs == {"vm": vm, "skipped": True, "unfinished": [op_name]}
        mc.reconcile()  # the VMOP completes
        later = ctx("parent", "reboot-later")
        later.name = c.name
        ACTORS["megatest-vm-reboot"].inject(pg, {"vmNamespace": world.vm_ns}, later)
        assert later.outputs["skipped"] is False
        # chaos-network-blocker, blocking-drbd: the DRBD ports of the first VM's volumes
        block = ACTORS["megatest-network-block"]
        params = {"variant": "blocking-drbd", "vmNamespace": world.vm_ns, "testCluster": "test"}
        for seed in range(20):  # until the first VM of the shuffle holds a replica of the RV
            c = ctx("parent", f"drbd-{seed}", seed)
            if refs := block.inject(pg, params, c):
                break
        assert c.outputs["ports"] == [drbd_port(rv)]
        nodes = [r["spec"].get("nodeName") for r in pg.list("test", A.STORAGE_API, A.RVR)]
        assert c.outputs["vm"] in nodes
        cnps = [pg.get("parent", A.CILIUM_API, A.CNP, world.vm_ns, r["name"]) for r in refs]
        check_policies(world, [p for p in cnps if p is not None], {rv})
        assert len(cnps) == 2 and None not in cnps
        block.recover(pg, refs, c)
    finally:
        for kind in (A.RVA, A.RVR, A.RV):
            for o in pg.list("test", A.STORAGE_API, kind):
                if o["metadata"]["name"].startswith(rv) or o["metadata"]["name"].startswith(f"rva-{rv}"):
                    pg.delete("test", A.STORAGE_API, kind, None, o["metadata"]["name"])
        for op in pg.list("parent", A.VIRT_API, A.VMOP, world.vm_ns):
            pg.delete("parent", A.VIRT_API, A.VMOP, world.vm_ns, op["metadata"]["name"])
        pg.close()
    assert leftovers(world) == {}
