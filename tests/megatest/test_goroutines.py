"""Each goroutine's branches on the simulated megatest world."""

from __future__ import annotations

from typing import Any

import pytest

from actors.megatest import split_groups
from tests.megatest.conftest import make_env, ready_rv, templates_run

STORAGE = "storage.deckhouse.io/v1alpha1"


def _rva(env: Any, rv: str, node: str) -> None:
    env.pg().create(
        "test",
        {
            "apiVersion": STORAGE,
            "kind": "ReplicatedVolumeAttachment",
            "metadata": {"name": f"rva-{rv}-{node}"},
            "spec": {"replicatedVolumeName": rv, "nodeName": node},
        },
    )


def _active(env: Any, rv: str) -> list[str]:
    return sorted(
        a["spec"]["nodeName"]
        for a in env.pg().list("test", STORAGE, "ReplicatedVolumeAttachment")
        if a["spec"]["replicatedVolumeName"] == rv and not a["metadata"].get("deletionTimestamp")
    )


@pytest.mark.parametrize("seed", range(6))
def test_attacher_from_0_normal_or_attach(seed: int) -> None:
    env = make_env()
    ready_rv(env)
    run = env.run_entry("volume-attacher-step", seed=seed, rv="rv-1")
    assert run.phase.value == "Succeed", run.message
    ts = templates_run(run)
    assert "volume-attacher-from-0" in ts
    if "volume-attacher-normal-cycle" in ts:  # add one and remove it: 0 nodes after
        assert _active(env, "rv-1") == []
    else:
        assert "volume-attacher-attach-cycle" in ts
        assert len(_active(env, "rv-1")) == 1


def test_attacher_with_1_detach_or_migration() -> None:
    seen: set[str] = set()
    for seed in range(8):
        env = make_env()
        ready_rv(env)
        _rva(env, "rv-1", "worker-01")
        run = env.run_entry("volume-attacher-step", seed=seed, rv="rv-1")
        assert run.phase.value == "Succeed", run.message
        ts = templates_run(run)
        plan = next(n for n in run.nodes.values() if n.template == "volume-attacher-plan").outputs
        assert plan["count"] == 1
        if plan["wanted"] == "worker-01":
            assert "volume-attacher-detach-cycle" in ts
            seen.add("detach")
        else:
            assert "volume-attacher-migration-cycle" in ts
            assert "volume-attacher-unpublish-old" in ts
            seen.add("migration")
        assert _active(env, "rv-1") == []  # 0 nodes after either way
    assert seen == {"detach", "migration"}


def test_attacher_with_2_detaches_a_random_one() -> None:
    env = make_env()
    ready_rv(env)
    _rva(env, "rv-1", "worker-01")
    _rva(env, "rv-1", "worker-02")
    run = env.run_entry("volume-attacher-step", rv="rv-1")
    assert run.phase.value == "Succeed", run.message
    assert "volume-attacher-detach-random-cycle" in templates_run(run)
    assert len(_active(env, "rv-1")) == 1


@pytest.mark.parametrize("variant", ["blocking-everything", "blocking-drbd", "split-brain"])
def test_network_blocker_variants(variant: str) -> None:
    env = make_env()
    ready_rv(env)
    seen: list[list[str]] = []
    env.trigger.call_at(
        env.clock.now() + 5,
        lambda: seen.append(
            [p["metadata"]["name"] for p in env.pg().list("parent", "cilium.io/v2", "CiliumNetworkPolicy")]
        ),
    )
    run = env.run_entry(f"chaos-{variant}")
    assert run.phase.value == "Succeed", run.message
    node = next(n for n in run.nodes.values() if n.template == f"chaos-{variant}")
    assert node.outputs["variant"] == variant
    assert seen and seen[0], "a policy was in place during the incident"
    assert env.pg().list("parent", "cilium.io/v2", "CiliumNetworkPolicy") == []  # deleted after
    if variant == "split-brain":
        a, b = node.outputs["groupA"], node.outputs["groupB"]
        assert len(a) == (len(a) + len(b) + 1) // 2
    if variant == "blocking-drbd":
        assert 1 <= len(node.outputs["ports"]) <= 2


def test_split_groups_rule() -> None:
    vms = ["a", "b", "c", "d", "e"]
    assert split_groups(vms, 0) == (["a", "b", "c"], ["d", "e"])  # odd: A is the larger part
    assert split_groups(vms, 1) == (["a"], ["b", "c", "d", "e"])
    assert split_groups(vms[:4], 0) == (["a", "b"], ["c", "d"])


def test_vm_reboot_restarts_or_skips_unfinished() -> None:
    env = make_env()
    ns = env.options.vm_ns
    run = env.run_entry("chaos-vm-reboot")
    out = next(n for n in run.nodes.values() if n.template == "chaos-vm-reboot").outputs
    assert out["skipped"] is False
    op = env.pg().get(
        "parent", "virtualization.deckhouse.io/v1alpha2", "VirtualMachineOperation", ns, out["vmop"]
    )
    assert op["spec"] == {"type": "Restart", "force": True, "virtualMachineName": out["vm"]}
    # every VM gets an unfinished operation: the next reboot is skipped and logged
    env2 = make_env()
    pg = env2.pg()
    api = env2.world.clusters["parent"].api
    for vm in env2.sim.vm_names:
        api.create(
            {
                "apiVersion": "virtualization.deckhouse.io/v1alpha2",
                "kind": "VirtualMachineOperation",
                "metadata": {"name": f"pending-{vm}", "namespace": ns},
                "spec": {"type": "Migrate", "virtualMachineName": vm},
            }
        )
    env2.sim.virtualization.stop() if hasattr(env2.sim.virtualization, "stop") else None
    before = len(pg.list("parent", "virtualization.deckhouse.io/v1alpha2", "VirtualMachineOperation", ns))
    run2 = env2.run_entry("chaos-vm-reboot")
    out2 = next(n for n in run2.nodes.values() if n.template == "chaos-vm-reboot").outputs
    assert out2["skipped"] is True and out2["unfinished"]
    assert (
        len(pg.list("parent", "virtualization.deckhouse.io/v1alpha2", "VirtualMachineOperation", ns))
        == before
    )


def test_startup_cleanup_deletes_policies_and_jobs() -> None:
    env = make_env()
    ns = env.options.vm_ns
    env.pg().create(
        "parent",
        {
            "apiVersion": "cilium.io/v2",
            "kind": "CiliumNetworkPolicy",
            "metadata": {"name": "old", "namespace": ns},
            "spec": {},
        },
    )
    env.pg().create(
        "test",
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "old-job", "namespace": "default"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox", "command": ["true"]}],
                    }
                }
            },
        },
    )
    run = env.run_entry("chaos-startup-cleanup")
    assert run.phase.value == "Succeed", run.message
    assert env.pg().list("parent", "cilium.io/v2", "CiliumNetworkPolicy") == []
    assert [
        j for j in env.pg().list("test", "batch/v1", "Job") if not j["metadata"].get("deletionTimestamp")
    ] == []


def test_degrader_jobs_follow_the_seed() -> None:
    env = make_env()
    run = env.run_entry("chaos-network-degrader-incident", seed=3)
    assert run.phase.value == "Succeed", run.message
    node = next(n for n in run.nodes.values() if n.template in ("chaos-losses", "chaos-latency"))
    jobs = node.outputs["jobs"]
    assert len(jobs) == (4 if node.outputs["variant"] == "losses" else 2)


def test_replica_destroyer_and_creator() -> None:
    env = make_env()
    ready_rv(env)
    run = env.run_entry("volume-replica-destroy", rv="rv-1")
    out = next(n for n in run.nodes.values() if n.template == "volume-replica-destroy").outputs
    assert out["rvr"].startswith("rv-1-")
    run = env.run_entry("volume-replica-create", rv="rv-1")
    out = next(n for n in run.nodes.values() if n.template == "volume-replica-create").outputs
    assert out["type"] in ("Access", "TieBreaker") and out["rvr"].startswith("rv-1-")
