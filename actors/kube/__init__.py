"""Real clusters through the official ``kubernetes`` client: :class:`KubePlayground`."""

from __future__ import annotations

from actors.kube.client import KubeCluster, RequestCounters
from actors.kube.config import ClusterConfig, RetryPolicy
from actors.kube.errors import Failure, KubeError, classify
from actors.kube.playground import KubePlayground
from actors.kube.ratelimit import TokenBucket
from actors.kube.watch import KubeWatch, WatchSubscription, diff_snapshots

__all__ = [
    "ClusterConfig",
    "Failure",
    "KubeCluster",
    "KubeError",
    "KubePlayground",
    "KubeWatch",
    "RequestCounters",
    "RetryPolicy",
    "TokenBucket",
    "WatchSubscription",
    "classify",
    "diff_snapshots",
]
