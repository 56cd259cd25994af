"""A seeded stand-in for megatest's goroutines, run directly on the timer heap (no engine), to
exercise the simulated world under constant chaos: volume spawner with attachers, replica
destroyers/creators, pod destroyers, network blocker (blocking-everything, blocking-drbd,
split-brain), network degrader (losses, latency) and VM reboots — with the seed's periods."""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors.sim.errors import APIError, NotFoundError
from actors.sim.rv import api as A
from tests.sim_rv.conftest import NS, Env, block_policy, latency_job, loss_job, split_policies, unloss_job


@dataclass
class Checker:
    """The seed's volume-checker for every RV: IOReady/Quorum transitions (even = held)."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    last: dict[str, dict[str, str]] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)

    def start(self, env: Env) -> None:
        env.test.watch(
            A.RV,
            callback=self.on_event,
            resource_version=env.test.resource_version(),
            api_version=A.STORAGE_API,
        )

    def on_event(self, etype: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if etype == "DELETED" or "deletionTimestamp" in obj["metadata"]:
            return  # volume-main stops the checker before it deletes the volume
        for ctype in (A.COND_IO_READY, A.COND_QUORUM):
            c = A.condition(obj, ctype)
            status = c["status"] if c else "Unknown"
            last = self.last.setdefault(name, {})
            if ctype not in last:
                if status == "True":  # counting starts once the volume was ready
                    last[ctype] = status
                    self.counts.setdefault(name, {A.COND_IO_READY: 0, A.COND_QUORUM: 0})
                continue
            if status != last[ctype]:
                last[ctype] = status
                self.counts[name][ctype] += 1
                self.trace.append(
                    f"{c and c['lastTransitionTime']} {name} {ctype}={status} {c and c['reason']}"
                )

    def broken(self) -> list[str]:
        return sorted(n for n, c in self.counts.items() if any(v % 2 for v in c.values()))


class Chaos:
    def __init__(self, env: Env, seed: int, *, max_volumes: int = 10, until: float = 3600.0) -> None:
        self.env = env
        self.rng = random.Random(seed)
        self.max_volumes = max_volumes
        self.end = env.now + until
        self.volumes: dict[str, float] = {}  # name -> end of life
        self.counter = 0
        self.actions: dict[str, int] = {}
        self.stopped = False
        self.retired: set[str] = set()

    # plumbing

    def at(self, delay: float, fn: Callable[[], None]) -> None:
        def run() -> None:
            if self.stopped or self.env.now >= self.end:
                return
            fn()

        self.env.timers.call_later(delay, run)

    def count(self, action: str) -> None:
        self.actions[action] = self.actions.get(action, 0) + 1

    def safe(self, fn: Callable[[], Any]) -> None:
        with contextlib.suppress(NotFoundError, APIError):
            fn()

    def start(self) -> None:
        self.at(0, self.spawner)
        self.at(self.rng.uniform(30, 60), lambda: self.pod_destroyer("agent", 1, 2))
        self.at(self.rng.uniform(30, 60), lambda: self.pod_destroyer("controller", 1, 3))
        self.at(self.rng.uniform(60, 300), self.blocker)
        self.at(self.rng.uniform(60, 300), self.degrader)
        self.at(self.rng.uniform(300, 360), self.reboter)

    # goroutines

    def spawner(self) -> None:
        if len(self.volumes) < self.max_volumes:
            for _ in range(self.rng.randint(1, 3)):
                self.counter += 1
                name = f"rv-{self.counter:04d}"
                sc = self.rng.choice(["sim-r2", "sim-r3"])
                life = self.rng.uniform(60, 300)
                self.volumes[name] = self.env.now + life
                self.env.test.create(
                    {
                        "apiVersion": A.STORAGE_API,
                        "kind": A.RV,
                        "metadata": {"name": name},
                        "spec": {"size": "1Gi", "replicatedStorageClassName": sc},
                    }
                )
                self.count("create-rv")
                initial = self.rng.choices([0, 1, 2], weights=[30, 60, 10])[0]
                for node in self.rng.sample(self.env.m.storage_nodes, initial):
                    self.attach(name, node)
                self.at(self.rng.uniform(30, 60), lambda n=name: self.attacher(n))
                self.at(self.rng.uniform(30, 300), lambda n=name: self.replica_destroyer(n))
                self.at(self.rng.uniform(30, 300), lambda n=name: self.replica_creator(n))
                self.at(life, lambda n=name: self.retire(n))
        self.at(self.rng.uniform(10, 30), self.spawner)

    def attach(self, rv: str, node: str) -> None:
        self.safe(
            lambda: self.env.test.create(
                {
                    "apiVersion": A.STORAGE_API,
                    "kind": A.RVA,
                    "metadata": {"name": f"rva-{rv}-{node}"},
                    "spec": {"replicatedVolumeName": rv, "nodeName": node},
                }
            )
        )
        self.count("attach")

    def detach(self, rv: str, node: str) -> None:
        self.safe(lambda: self.env.test.delete(A.RVA, f"rva-{rv}-{node}"))
        self.count("detach")

    def rvas(self, rv: str) -> list[str]:
        items = self.env.test.list(A.RVA, api_version=A.STORAGE_API)["items"]
        return sorted(
            r["spec"]["nodeName"]
            for r in items
            if r["spec"]["replicatedVolumeName"] == rv and "deletionTimestamp" not in r["metadata"]
        )

    def attacher(self, rv: str) -> None:
        if rv not in self.volumes:
            return
        wanted = self.rng.choice(self.env.m.storage_nodes)
        active = self.rvas(rv)
        if not active:
            self.attach(rv, wanted)
            if self.rng.randint(0, 99) >= 10:  # normal cycle: detach it again a bit later
                self.at(self.rng.uniform(5, 20), lambda: self.detach(rv, wanted))
        elif len(active) == 1:
            if wanted not in active:  # migration emulation
                self.attach(rv, wanted)
                self.at(self.rng.uniform(5, 15), lambda: self.detach(rv, active[0]))
                self.at(self.rng.uniform(20, 40), lambda: self.detach(rv, wanted))
            else:
                self.detach(rv, wanted)
        else:
            self.detach(rv, self.rng.choice(active))
        self.at(self.rng.uniform(30, 60), lambda: self.attacher(rv))

    def replica_destroyer(self, rv: str) -> None:
        if rv not in self.volumes:
            return
        names = sorted(r["metadata"]["name"] for r in self.env.replicas(rv))
        if names:
            victim = self.rng.choice(names)
            self.safe(lambda: self.env.test.delete(A.RVR, victim))
            self.count("delete-rvr")
        self.at(self.rng.uniform(30, 300), lambda: self.replica_destroyer(rv))

    def replica_creator(self, rv: str) -> None:
        if rv not in self.volumes:
            return
        used = {r["metadata"]["name"] for r in self.env.replicas(rv)}
        free = [f"{rv}-{i}" for i in range(32) if f"{rv}-{i}" not in used]
        if free:
            rtype = self.rng.choice([A.ACCESS, A.TIEBREAKER])
            self.safe(lambda: self.env.create_rvr(rv, free[0], rtype))
            self.count("create-rvr")
        self.at(self.rng.uniform(30, 300), lambda: self.replica_creator(rv))

    def retire(self, rv: str) -> None:
        self.volumes.pop(rv, None)
        self.retired.add(rv)
        for node in self.rvas(rv):
            self.detach(rv, node)
        self.safe(lambda: self.env.test.delete(A.RV, rv))
        self.count("delete-rv")

    def pod_destroyer(self, app: str, lo: int, hi: int) -> None:
        pods = sorted(
            p["metadata"]["name"]
            for p in self.env.test.list("Pod", A.CONTROL_PLANE_NAMESPACE, f"app={app}")["items"]
        )
        self.rng.shuffle(pods)
        for name in pods[: self.rng.randint(lo, hi)]:
            self.safe(lambda n=name: self.env.test.delete("Pod", n, A.CONTROL_PLANE_NAMESPACE))
            self.count(f"kill-{app}")
        self.at(self.rng.uniform(30, 60), lambda: self.pod_destroyer(app, lo, hi))

    def blocker(self) -> None:
        vms = list(self.env.m.vm_names)
        self.rng.shuffle(vms)
        roll = self.rng.randint(0, 99)
        if roll <= 30:
            pols = [block_policy("chaos-block-everything", vms[:2])]
            self.count("blocking-everything")
        elif roll <= 60:
            ports = sorted(
                {
                    int((rv.get("status") or {}).get("drbdPort") or 0)
                    for rv in self.env.test.list(A.RV, api_version=A.STORAGE_API)["items"]
                }
                - {0}
            )
            picked = self.rng.sample(ports, min(2, len(ports))) if ports else [7000]
            pols = [block_policy("chaos-block-drbd", vms[:1] + vms[1:], ports=picked)]
            self.count("blocking-drbd")
        else:
            half = (len(vms) + 1) // 2
            pols = split_policies("chaos-split", vms[:half], vms[half:])
            self.count("split-brain")
        for pol in pols:
            self.safe(lambda p=pol: self.env.parent.create(p))

        def heal() -> None:
            for pol in pols:
                self.safe(lambda p=pol: self.env.parent.delete(A.CNP, p["metadata"]["name"], NS))

        self.env.timers.call_later(self.rng.uniform(10, 60), heal)
        self.at(self.rng.uniform(60, 300), self.blocker)

    def degrader(self) -> None:
        nodes = list(self.env.m.storage_nodes)
        self.rng.shuffle(nodes)
        a, b = nodes[:2]
        life = int(self.rng.uniform(10, 60))
        jobs: list[dict[str, Any]] = []
        if self.rng.randint(0, 99) <= 50:
            for me, peer in ((a, b), (b, a)):
                jobs.append(loss_job(f"{me}-add-iptables", me, self.env.m.vm_ip(peer), 0.01))
                jobs.append(unloss_job(f"{me}-del-iptables", me, f"{me}-add-iptables", life))
            self.count("losses")
        else:
            for me, peer in ((a, b), (b, a)):
                jobs.append(latency_job(f"{me}-latency", me, self.env.m.vm_ip(peer), life))
            self.count("latency")
        for job in jobs:
            name = job["metadata"]["name"]
            self.safe(lambda n=name: self.env.test.delete("Job", n, "default", propagation="Background"))
            self.safe(lambda j=job: self.env.test.create(j))
        self.at(life + self.rng.uniform(60, 300), self.degrader)

    def reboter(self) -> None:
        vms = list(self.env.m.vm_names)
        self.rng.shuffle(vms)
        vm = vms[0]
        ops = [
            o
            for o in self.env.parent.list(A.VMOP, NS, api_version=A.VIRT_API)["items"]
            if o["spec"]["virtualMachineName"] == vm
        ]
        unfinished = [o for o in ops if (o.get("status") or {}).get("phase") not in ("Completed", "Failed")]
        if unfinished:
            self.count("reboot-skipped")
        else:
            self.counter += 1
            self.env.restart_vm(vm, name=f"megatest-chaos-restart-{self.counter:04d}")
            self.count("reboot")
        period = self.rng.uniform(60, 300)
        if period < 300:
            period = self.rng.uniform(300, 360)
        self.at(period, self.reboter)


def run(env: Env, seed: int, seconds: float = 3600.0, max_volumes: int = 10) -> tuple[Chaos, Checker]:
    checker = Checker()
    checker.start(env)
    chaos = Chaos(env, seed, max_volumes=max_volumes, until=seconds)
    chaos.start()
    step = 30.0
    t_end = env.now + seconds
    while env.now < t_end:
        env.advance(min(step, t_end - env.now))
        for rv in env.test.list(A.RV, api_version=A.STORAGE_API)["items"]:
            assert len((rv.get("status") or {}).get("actuallyAttachedTo") or ()) <= 2
    chaos.stopped = True
    return chaos, checker


def fingerprint(env: Env, checker: Checker) -> str:
    h = hashlib.sha256()
    h.update("\n".join(checker.trace).encode())
    for name, cluster in sorted(env.world.clusters.items()):
        h.update(name.encode())
        h.update(json.dumps(cluster.api.snapshot()["objects"], sort_keys=True).encode())
    return h.hexdigest()
