"""How to reach one named cluster, and how hard to try."""

from __future__ import annotations

import copy
import os
import random
from dataclasses import dataclass, field, replace
from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from actors.base import ActorError


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter (the fields of client-go's ``wait.Backoff``).

    The n-th retry waits ``min(cap, initial * factor**(n-1))``, stretched by up to ``jitter`` of
    itself (a draw from the playground's seeded rng). ``attempts`` bounds the calls of one
    request, the first included (1 = never retry); watches retry forever and ignore it."""

    attempts: int = 5
    initial: float = 0.1
    factor: float = 2.0
    jitter: float = 0.2
    cap: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError(f"attempts must be at least 1, got {self.attempts}")
        if self.initial < 0 or self.factor < 1 or self.jitter < 0 or self.cap < 0:
            raise ValueError(f"invalid retry policy {self}")

    def delay(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        base = min(self.cap, self.initial * self.factor ** max(0, retry - 1))
        return base * (1.0 + self.jitter * rng.random())


@dataclass(frozen=True)
class ClusterConfig:
    """One named cluster: a kubeconfig (``kubeconfig=None``: ``$KUBECONFIG`` or ``~/.kube/config``)
    and ``context`` (None: its current context), or the in-cluster service account
    (:meth:`in_cluster`), or a ready ``configuration`` (a ``kubernetes.client.Configuration``,
    copied; mostly for tests).

    ``qps``/``burst`` drive the client-side token bucket (``qps <= 0`` disables it);
    ``request_timeout`` bounds every non-watch request (seconds, connect + read); watches ask the
    server to end them after ``watch_timeout_seconds`` and then resume."""

    kubeconfig: str | os.PathLike[str] | None = None
    context: str | None = None
    incluster: bool = False
    configuration: Any = None
    qps: float = 50.0
    burst: int = 100
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    watch_retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(initial=0.2, cap=10.0))
    watch_timeout_seconds: int = 300
    request_timeout: float = 30.0
    connect_timeout: float = 10.0

    @classmethod
    def in_cluster(cls, **kwargs: Any) -> ClusterConfig:
        """The service account of the pod we run in (token refreshed as kubelet rotates it)."""
        return cls(incluster=True, **kwargs)

    def with_options(self, **changes: Any) -> ClusterConfig:
        return replace(self, **changes)

    def build_configuration(self, cluster: str) -> client.Configuration:
        """A fresh ``kubernetes.client.Configuration`` (never the global default one)."""
        try:
            if self.configuration is not None:
                cfg = copy.deepcopy(self.configuration)
            else:
                cfg = client.Configuration()
                if self.incluster:
                    config.load_incluster_config(client_configuration=cfg)
                else:
                    config.load_kube_config(
                        config_file=os.fspath(self.kubeconfig) if self.kubeconfig is not None else None,
                        context=self.context,
                        client_configuration=cfg,
                        persist_config=False,
                    )
        except (ConfigException, OSError, ValueError, TypeError) as e:
            source = "in-cluster config" if self.incluster else f"kubeconfig {self.kubeconfig or '(default)'}"
            if self.context:
                source += f" context {self.context!r}"
            raise ActorError(f'cluster "{cluster}": cannot load {source}: {e}') from e
        # Retries are ours (with backoff, counted and logged), not urllib3's silent immediate ones.
        cfg.retries = False
        return cfg
