"""Controls in controller mode against a real kube-apiserver + etcd: the annotations
``chaosflow.io/suspend``, ``chaosflow.io/approve``, ``chaosflow.io/terminate`` and the Kubernetes
form of ``chaosflow suspend|unsuspend|terminate|stop --kubeconfig K -n NS NAME``.

- a suspended workflow starts nothing new, stays suspended across a kill -9 of the controller,
  and finishes once the annotation is removed (while no controller runs: the next one applies it);
- a subtree suspended with ``chaosflow suspend --node`` (``chaosflow.io/suspend-nodes``);
- a manual Suspend step is approved by the annotation and by ``chaosflow unsuspend --node``;
- terminate: chaos removed, the exit handler never runs;
- CLI errors (no such workflow, finished, forbidden) are one line with exit 2/1.

Helpers and fixtures come from test_controller.py.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actors.kube import KubePlayground
from tests.e2e import test_controller as tc
from tests.e2e.test_controller import (
    REPO,
    WF_API,
    Controller,
    chaos_cm,
    chaos_objects,
    eventually,
    get_wf,
    wait_phase,
    workflow,
)

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e

# the fixtures of test_controller.py (pytest finds fixtures among a module's attributes)
pg = tc.pg
crds = tc.crds
ns = tc.ns
controllers = tc.controllers


def cli(*args: str, kubeconfig: Path, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "engine.cli", args[0], "--kubeconfig", str(kubeconfig), *args[1:]]
    return subprocess.run(argv, check=False, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def annotate(pg: KubePlayground, ns: str, name: str, **ann: str | None) -> None:
    pg.patch("default", WF_API, "Workflow", ns, name, {"metadata": {"annotations": ann}})


def status(pg: KubePlayground, ns: str, name: str) -> dict[str, Any]:
    wf = get_wf(pg, ns, name)
    assert wf is not None
    return wf.get("status") or {}


def nodes(pg: KubePlayground, ns: str, name: str) -> dict[str, str]:
    """node name -> phase"""
    return {n["name"]: n["phase"] for n in status(pg, ns, name).get("nodes") or []}


def reasons(pg: KubePlayground, ns: str, need: set[str]) -> set[str]:
    got = {str(e.get("reason")) for e in pg.list("default", "v1", "Event", ns)}
    assert need <= got, got
    return got


def _assert(cond: bool, msg: Any = "") -> None:
    assert cond, msg


def sus(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "templateType": "Suspend", **extra}


# ---------------------------------------------------------------------------------------------------
def test_suspend_survives_restart_then_continues(
    kube: KubeAPIServer, pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    ctl = controllers("sus-a", "--namespace", ns, "--no-leader-elect")
    templates = [
        {"name": "main", "templateType": "Serial", "children": ["s1", "s2", "s3"]},
        *(sus(n, duration="2s") for n in ("s1", "s2", "s3")),
    ]
    pg.create("default", workflow(ns, "pausy", templates))
    eventually(lambda: _assert("s1-1" in nodes(pg, ns, "pausy")), timeout=15)
    r = cli("suspend", "-n", ns, "pausy", "--wait", "15", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0, r.stderr
    assert f"workflow {ns}/pausy suspended" in r.stdout, r.stdout
    wf = get_wf(pg, ns, "pausy")
    assert wf is not None and wf["metadata"]["annotations"]["chaosflow.io/suspend"] == "true"
    assert wf["status"]["suspended"] is True and wf["status"]["engine"]["suspended"] is True
    before = nodes(pg, ns, "pausy")
    assert "s3-3" not in before and list(before.values())[-1] == "Holding", before
    time.sleep(2.5)  # s1 is due meanwhile: its end is held, nothing new starts
    assert nodes(pg, ns, "pausy") == before
    eventually(lambda: reasons(pg, ns, {"Suspended"}), timeout=10)
    # suspending again: already done, nothing patched
    r = cli("suspend", "-n", ns, "pausy", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0 and "already" in r.stdout, (r.stdout, r.stderr)

    ctl.kill9()
    ctl = controllers("sus-b", "--namespace", ns, "--no-leader-elect")
    eventually(lambda: _assert(ctl.get("/readyz")[0] == 200), timeout=20)
    time.sleep(1.5)
    assert nodes(pg, ns, "pausy") == before
    assert status(pg, ns, "pausy")["suspended"] is True

    # removing the annotation continues — also when it goes while no controller runs (level-based)
    ctl.kill9()
    annotate(pg, ns, "pausy", **{"chaosflow.io/suspend": None})
    ctl = controllers("sus-c", "--namespace", ns, "--no-leader-elect")
    wf = wait_phase(pg, ns, "pausy", "Succeed", timeout=20)
    assert wf["status"]["progress"] == "4/4" and "suspended" not in wf["status"]
    eventually(lambda: reasons(pg, ns, {"Resumed"}), timeout=10)


def test_approve_by_annotation_and_cli(
    kube: KubeAPIServer, pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("appr", "--namespace", ns, "--no-leader-elect")
    templates = [
        {"name": "main", "templateType": "Serial", "children": ["gate1", "gate2", "gate3"]},
        *(sus(n, manual=True) for n in ("gate1", "gate2", "gate3")),
    ]
    pg.create("default", workflow(ns, "gated", templates))
    eventually(lambda: _assert(nodes(pg, ns, "gated").get("gate1-1") == "Holding"), timeout=15)
    # a subtree suspended (the CLI's --node form: chaosflow.io/suspend-nodes)
    r = cli("suspend", "-n", ns, "gated", "--node", "main", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0 and "suspended main-0" in r.stdout, (r.stdout, r.stderr)
    assert status(pg, ns, "gated")["suspended"] == ["main-0"]
    annotate(pg, ns, "gated", **{"chaosflow.io/approve": "gate1"})  # a template name
    eventually(lambda: _assert(nodes(pg, ns, "gated").get("gate1-1") == "Succeed"), timeout=15)
    time.sleep(1)  # the next step is created but does not start: its parent is suspended
    assert nodes(pg, ns, "gated").get("gate2-2") == "Init"
    r = cli("unsuspend", "-n", ns, "gated", "--node", "main", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0 and "main continues" in r.stdout, (r.stdout, r.stderr)
    eventually(lambda: _assert(nodes(pg, ns, "gated").get("gate2-2") == "Holding"), timeout=15)
    wf = get_wf(pg, ns, "gated")
    assert wf is not None and "chaosflow.io/suspend-nodes" not in wf["metadata"]["annotations"]
    time.sleep(0.5)  # gate2 is not covered by the annotation: it keeps waiting
    assert nodes(pg, ns, "gated")["gate2-2"] == "Holding"
    eventually(lambda: reasons(pg, ns, {"Approved"}), timeout=10)

    r = cli("unsuspend", "-n", ns, "gated", "--node", "gate2-2", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0, r.stderr
    assert "gate2-2 resumed" in r.stdout, r.stdout
    eventually(lambda: _assert(nodes(pg, ns, "gated").get("gate3-3") == "Holding"), timeout=15)
    wf = get_wf(pg, ns, "gated")
    # the CLI adds node names to what is there (a template name stays: it may cover later nodes)
    assert wf is not None and wf["metadata"]["annotations"]["chaosflow.io/approve"] == "gate1,gate2-2"
    # without --node: every waiting approval (as in the local form); finished names are dropped
    r = cli("unsuspend", "-n", ns, "gated", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0 and "gate3-3 resumed" in r.stdout, (r.stdout, r.stderr)
    wf = wait_phase(pg, ns, "gated", "Succeed", timeout=15)
    assert wf["metadata"]["annotations"]["chaosflow.io/approve"] == "gate1,gate3-3"
    assert wf["status"]["progress"] == "4/4"


def test_terminate_removes_chaos_skips_exit_handler_and_cli_errors(
    kube: KubeAPIServer, pg: KubePlayground, ns: str, controllers: Callable[..., Controller]
) -> None:
    controllers("term", "--namespace", ns, "--no-leader-elect")
    templates = [chaos_cm("hold", "60s"), chaos_cm("bye", "1s")]
    pg.create("default", workflow(ns, "held", templates, onExit="bye"))
    eventually(lambda: _assert(len(chaos_objects(pg, ns)) == 1), timeout=15)
    r = cli("terminate", "-n", ns, "held", kubeconfig=kube.kubeconfig)
    assert r.returncode == 0, r.stderr
    assert f"terminate requested for {ns}/held" in r.stdout, r.stdout
    wf = wait_phase(pg, ns, "held", "Failed", timeout=15)
    assert "terminated" in wf["status"]["message"]
    assert {n["templateName"] for n in wf["status"]["nodes"]} == {"hold"}  # no exit handler node
    assert chaos_objects(pg, ns) == []
    eventually(lambda: reasons(pg, ns, {"Terminated"}), timeout=10)

    # errors: one line on stderr, no traceback
    r = cli("stop", "-n", ns, "held", kubeconfig=kube.kubeconfig)
    assert r.returncode == 1 and r.stderr.strip() == f"workflow {ns}/held already finished (Failed)", r
    r = cli("suspend", "-n", ns, "nope", kubeconfig=kube.kubeconfig)
    assert r.returncode == 2 and r.stderr.strip() == f"{ns}/nope: no such Workflow", r
    r = cli("stop", "-n", ns, "held", "--message", "x", kubeconfig=kube.kubeconfig)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r

    # RBAC: a user who may read Workflows but not patch them; then the documented role (docs/rbac.md)
    pg.create("default", workflow(ns, "long", [chaos_cm("hold2", "60s")]))
    user = kube.user_kubeconfig(f"alice-{ns}")
    kube.kubectl("create", "role", "wf-read", "-n", ns, "--verb=get", "--resource=workflows.chaosflow.io")
    kube.kubectl("create", "rolebinding", "wf-read", "-n", ns, "--role=wf-read", f"--user=alice-{ns}")
    r = eventually(lambda: _forbidden(cli("suspend", "-n", ns, "long", kubeconfig=user)), timeout=10)
    assert r.returncode == 1 and len(r.stderr.strip().splitlines()) == 1, r
    assert "Traceback" not in r.stderr
    kube.kubectl(
        "create", "role", "wf-control", "-n", ns, "--verb=get,patch", "--resource=workflows.chaosflow.io"
    )
    kube.kubectl("create", "rolebinding", "wf-control", "-n", ns, "--role=wf-control", f"--user=alice-{ns}")
    r = eventually(lambda: _ok(cli("stop", "-n", ns, "long", kubeconfig=user)), timeout=10)
    assert f"stop requested for {ns}/long" in r.stdout
    wait_phase(pg, ns, "long", "Failed", timeout=15)
    eventually(lambda: _assert(chaos_objects(pg, ns) == []), timeout=10)


def _forbidden(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert "forbidden" in r.stderr and "patch" in r.stderr, r.stderr
    return r


def _ok(r: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert r.returncode == 0, r.stderr
    return r
