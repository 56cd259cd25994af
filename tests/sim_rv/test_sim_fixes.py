"""Fixes of the simulated world found by megatest runs:

* after a VM reboot the agent reconciles every replica of its node: a replica whose DRBD resource is
  not up (yet) is reported so (not Primary, not in quorum), so its last report from before the
  reboot (role Primary) cannot keep the volume "attached" and block its deletion for ever; a deleted
  replica the controller has not released yet is brought up again (it keeps its vote);
* the controller labels every replica of a volume with the volume's name (users' replicas too).
"""

from __future__ import annotations

from typing import Any

from actors.sim.rv import api as A
from tests.sim_rv.conftest import Env, make_env


def _rvr(env: Env, name: str) -> dict[str, Any]:
    obj = env.get(A.RVR, name)
    assert obj is not None, name
    return obj


def _conds(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in (obj.get("status") or {}).get("conditions") or ()}


def _attach_and_reboot(env: Env, rv: str) -> tuple[str, str]:
    """Attach ``rv`` on the node of its replica ``<rv>-0`` and restart that node's VM; returns
    (node, rva)."""
    node = str(_rvr(env, f"{rv}-0")["spec"]["nodeName"])
    rva = env.attach(rv, node)
    env.wait(lambda: env.attached(rv) == [node], timeout=30)
    env.restart_vm(node)
    env.wait(lambda: env.vm_phase(node) != "Running", timeout=10)
    return node, rva


def test_volume_deleted_right_after_a_reboot_of_its_attached_node_goes() -> None:
    """megatest 1 h, seed 7: an RV deleted in the seconds between the agent's return after a VM
    reboot and the reconfiguration of its replica there hung for ever. The replica reported
    Configured=False, but still role Primary (and Ready/IOReady/InQuorum NodeNotReady) from before
    the reboot: the controller took the volume for attached on that node, never released the
    replicas' finalizers, and the deleted replica was never brought up again to correct it."""
    env = make_env()
    env.create_rv("v")
    node, rva = _attach_and_reboot(env, "v")
    env.wait(lambda: env.cond("Node", node, "Ready") != ("True", "KubeletReady"), timeout=120)
    env.delete(A.RVA, rva)  # the replica is offline: the attachment goes
    env.wait(lambda: env.get(A.RVA, rva) is None, timeout=30)
    # the node is back, its agent reports the replica whose DRBD resource is not up yet
    env.wait(lambda: _conds(_rvr(env, "v-0"))[A.COND_CONFIGURED][0] == "False", timeout=120)
    r = _rvr(env, "v-0")
    assert r["status"]["drbd"]["role"] == "Secondary"
    assert _conds(r)[A.COND_ATTACHED][0] == "False"
    assert {_conds(r)[c] for c in (A.COND_IN_QUORUM, A.COND_IO_READY, A.COND_READY)} <= {
        ("False", "Uninitialized"),
        ("False", "NotReady"),
    }
    assert env.attached("v") == []
    env.test.delete(A.RV, "v")
    env.wait(lambda: env.get(A.RV, "v") is None, timeout=60)
    assert env.replicas("v") == []


def test_deleted_replica_held_by_the_controller_is_brought_up_after_a_reboot() -> None:
    """The volume-replica-destroyer deletes the attached replica while its VM reboots (a short
    boot: its Node never turns NotReady, so nothing marks the replica offline). The controller holds
    it (it was attached); once the node is back its agent brings the DRBD resource up again as
    Secondary (a deleted replica is not promoted), it votes again, the controller releases it once
    its replacement synced, and the attachment moves to a new replica on that node."""
    env = make_env(timing={"vm_boot": 20})
    env.create_rv("v")
    node, rva = _attach_and_reboot(env, "v")
    uid = _rvr(env, "v-0")["metadata"]["uid"]
    env.delete(A.RVR, "v-0")
    env.advance(1)
    assert A.CONTROLLER_FINALIZER in _rvr(env, "v-0")["metadata"]["finalizers"]
    env.wait(lambda: env.vm_phase(node) == "Running", timeout=60)
    assert env.cond("Node", node, "Ready") == ("True", "KubeletReady")

    kern = env.m.kernel("v")
    assert kern is not None
    env.wait(lambda: kern.replicas[uid].configured, timeout=30)  # up again, held
    k = kern.replicas[uid]
    assert not k.primary and k.voting
    env.advance(1)
    r = _rvr(env, "v-0")
    assert A.CONTROLLER_FINALIZER in r["metadata"]["finalizers"]
    assert r["status"]["drbd"]["role"] == "Secondary"
    assert _conds(r)[A.COND_CONFIGURED] == ("True", "Configured")
    assert node not in env.attached("v")
    # released once the replacement synced, torn down; the attachment gets a new replica there
    # (an Access replica, which may take the free name v-0)
    env.wait(lambda: uid not in {r["metadata"]["uid"] for r in env.replicas("v")}, timeout=300)
    env.wait(lambda: env.attached("v") == [node] and env.healthy("v"), timeout=120)
    env.delete(A.RVA, rva)
    env.wait(lambda: env.get(A.RVA, rva) is None, timeout=60)
    env.test.delete(A.RV, "v")
    env.wait(lambda: env.get(A.RV, "v") is None, timeout=60)
    assert env.callback_errors() == 0


def test_controller_labels_every_replica_of_a_volume() -> None:
    """Users' replicas (megatest's volume-replica-creator: no labels, no node) get the volume label
    too, as the controller's own; megatest's RVR watcher selects replicas by it."""
    env = make_env()
    env.create_rv("v")
    env.create_rvr("v", "v-7", A.ACCESS)
    env.create_rvr("v", "v-8", A.TIEBREAKER, node=None)
    env.test.create(
        {
            "apiVersion": A.STORAGE_API,
            "kind": A.RVR,
            "metadata": {"name": "v-9", "labels": {A.RV_LABEL: "wrong", "keep": "me"}},
            "spec": {"replicatedVolumeName": "v", "type": A.ACCESS},
        }
    )
    env.advance(5)
    names = sorted(r["metadata"]["name"] for r in env.replicas("v"))
    assert {"v-0", "v-1", "v-2", "v-7", "v-9"} <= set(names)
    for name in names:
        labels = _rvr(env, name)["metadata"].get("labels") or {}
        assert labels.get(A.RV_LABEL) == "v", name
    assert (_rvr(env, "v-9")["metadata"]["labels"] or {}).get("keep") == "me"
    selected = env.test.list(A.RVR, label_selector=f"{A.RV_LABEL}=v", api_version=A.STORAGE_API)["items"]
    assert sorted(r["metadata"]["name"] for r in selected) == names
