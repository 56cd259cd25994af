"""The DRBD layer of the simulation ("what the kernels do"), independent of the Kubernetes objects.

A :class:`VolumeKernel` holds, per replica, what lives on the nodes rather than in the API: whether
the DRBD resource is up (configured), the disk state (UpToDate / Outdated / Inconsistent /
Diskless), the role (Primary = attached), a running resync, and the StandAlone flag of an
unresolved split-brain. It is saved in the cluster snapshot (controller state), so a restored world
continues with the same disks.

Quorum follows DRBD's ``quorum majority``: the voters are the Diskful and TieBreaker replicas the
resource is configured with (offline ones included); a replica has quorum when it is connected to
a majority of them (itself counted when it votes). The *volume* has quorum when a majority of the
voters are online and all connected to each other (a clique of the connectivity graph), and is
IO-ready when that clique holds an UpToDate Diskful replica.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from actors.sim.rv.api import DISKFUL, DISKLESS, UP_TO_DATE, VOTING_TYPES

__all__ = ["ReplicaKernel", "VolumeKernel", "has_quorum", "majority", "max_clique"]


@dataclass(slots=True)
class ReplicaKernel:
    """Node-side state of one replica (keyed by the RVR's uid)."""

    name: str
    node: str
    type: str
    disk: str
    configured: bool = False
    configured_at: float | None = None
    primary: bool = False
    attach_pending_since: float | None = None
    detach_pending_since: float | None = None
    sync_since: float | None = None
    sync_total: float = 0.0
    standalone: bool = False
    #: the agent may tear the deleted replica down from here on (its finalizer is the last one)
    teardown_since: float | None = None

    @property
    def voting(self) -> bool:
        return self.type in VOTING_TYPES

    @property
    def diskful(self) -> bool:
        return self.type == DISKFUL

    @property
    def up_to_date(self) -> bool:
        return self.type == DISKFUL and self.disk == UP_TO_DATE

    def drop_runtime(self) -> None:
        """The node went down: the DRBD resource is gone from its kernel (the disk stays)."""
        self.configured = False
        self.primary = False
        self.attach_pending_since = None
        self.detach_pending_since = None
        self.sync_since = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaKernel:
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


@dataclass(slots=True)
class VolumeKernel:
    """Node-side state of one volume (keyed by the RV's uid)."""

    #: the volume was attached (written) at least once: new Diskful replicas need a full sync
    ever_primary: bool = False
    replicas: dict[str, ReplicaKernel] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "everPrimary": self.ever_primary,
            "replicas": {uid: r.to_dict() for uid, r in sorted(self.replicas.items())},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> VolumeKernel:
        return cls(
            ever_primary=bool(data.get("everPrimary")),
            replicas={
                uid: ReplicaKernel.from_dict(r) for uid, r in sorted((data.get("replicas") or {}).items())
            },
        )

    def new_disk_state(self, rtype: str) -> str:
        """Disk state of a replica configured now: diskless types are Diskless; a Diskful replica of a
        volume that was never written starts UpToDate (thin volumes are zeroed, DRBD skips the
        initial sync), otherwise Inconsistent until it synced from an UpToDate peer."""
        if rtype != DISKFUL:
            return DISKLESS
        return "Inconsistent" if self.ever_primary else UP_TO_DATE


def majority(voters: int) -> int:
    """Smallest majority of ``voters`` (0 voters -> no quorum possible)."""
    return voters // 2 + 1


def has_quorum(connected_voters: int, voters: int) -> bool:
    return voters > 0 and connected_voters >= majority(voters)


def max_clique(
    nodes: Sequence[str],
    linked: Callable[[str, str], bool],
    prefer: Callable[[frozenset[str]], tuple[Any, ...]] | None = None,
) -> frozenset[str]:
    """The largest set of ``nodes`` pairwise ``linked`` (ties broken by ``prefer``, larger
    wins, then by names). Exact for the handful of replicas a volume has; above 12 nodes a
    greedy approximation is used."""
    names = sorted(nodes)
    if not names:
        return frozenset()
    if len(names) > 12:
        best: list[str] = []
        for n in names:
            if all(linked(n, m) for m in best):
                best.append(n)
        return frozenset(best)
    adj = {a: {b for b in names if b != a and linked(a, b)} for a in names}
    for size in range(len(names), 0, -1):
        found: list[frozenset[str]] = []
        for combo in itertools.combinations(names, size):
            if all(b in adj[a] for a, b in itertools.combinations(combo, 2)):
                found.append(frozenset(combo))
        if found:
            if prefer is None:
                return found[0]
            return max(found, key=prefer)  # the first best: combinations come in name order
    return frozenset()
