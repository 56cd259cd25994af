"""One connection to one named cluster: its own ApiClient, DynamicClient, rate limiter, discovery,
request counters and retry loop.

Every HTTP request of a cluster (discovery, watches and pod logs included) goes through
:meth:`_InstrumentedApiClient.call_api`, which takes a token from the cluster's bucket and counts
the request by ``(cluster, verb, code)``. :meth:`KubeCluster.call` runs one logical request with
retries: transient failures are retried with exponential backoff and jitter, up to
``RetryPolicy.attempts`` calls; everything else (404, 409 Conflict, 422, 403, ...) surfaces at once.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from kubernetes.client import ApiClient
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError
from kubernetes.dynamic.resource import Resource

from actors.kube.config import ClusterConfig, RetryPolicy
from actors.kube.discovery import Discovery
from actors.kube.errors import Failure, KubeError, classify
from actors.kube.ratelimit import TokenBucket

log = logging.getLogger("chaosflow.kube")

T = TypeVar("T")
CounterKey = tuple[str, str, str]  # cluster, verb, code

_context = threading.local()


@contextlib.contextmanager
def request_verb(verb: str) -> Iterator[None]:
    """Labels the HTTP requests made by this thread inside the block with ``verb``."""
    previous = getattr(_context, "verb", None)
    _context.verb = verb
    try:
        yield
    finally:
        _context.verb = previous


class RequestCounters:
    """Thread-safe counts of HTTP requests by (cluster, verb, code); ``code`` is the HTTP status
    or ``error`` when no response arrived. Retries count as separate requests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[CounterKey] = collections.Counter()

    def inc(self, cluster: str, verb: str, code: str) -> None:
        with self._lock:
            self._counts[(cluster, verb, code)] += 1

    def snapshot(self) -> dict[CounterKey, int]:
        with self._lock:
            return dict(self._counts)


class _InstrumentedApiClient(ApiClient):
    """An ApiClient whose every request is rate-limited and counted."""

    def __init__(
        self, configuration: Any, *, cluster: str, limiter: TokenBucket, counters: RequestCounters
    ) -> None:
        super().__init__(configuration=configuration)
        self.cluster = cluster
        self.limiter = limiter
        self.counters = counters
        self.user_agent = "chaosflow/kube-playground"

    def call_api(
        self,
        method: str,
        url: str,
        header_params: Any = None,
        body: Any = None,
        post_params: Any = None,
        _request_timeout: Any = None,
    ) -> Any:
        verb = getattr(_context, "verb", None) or str(method).lower()
        waited = self.limiter.acquire()
        if waited > 0.1:
            log.debug(
                "client-side throttling: waited %.2fs",
                waited,
                extra={"cluster": self.cluster, "verb": verb, "waited": round(waited, 3)},
            )
        try:
            resp = super().call_api(
                method,
                url,
                header_params=header_params,
                body=body,
                post_params=post_params,
                _request_timeout=_request_timeout,
            )
        except BaseException as exc:
            failure = classify(exc)
            self.counters.inc(self.cluster, verb, failure.code_label if failure else "error")
            raise
        self.counters.inc(self.cluster, verb, str(resp.status))
        return resp


def decode(resp: Any) -> Any:
    """The JSON body of a urllib3 response (None when empty)."""
    data = resp.data
    if not data:
        return None
    return json.loads(data)


class KubeCluster:
    """Clients and policies of one named cluster. ``call`` is the retry loop."""

    def __init__(
        self,
        name: str,
        config: ClusterConfig,
        *,
        counters: RequestCounters,
        rng: random.Random,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.config = config
        self.rng = rng
        self.sleep = sleep
        self.limiter = TokenBucket(config.qps, config.burst, clock=clock, sleep=sleep)
        self.api_client = _InstrumentedApiClient(
            config.build_configuration(name), cluster=name, limiter=self.limiter, counters=counters
        )
        self.dynamic = DynamicClient(
            self.api_client, discoverer=functools.partial(Discovery, fetch=self._fetch_json, cluster=name)
        )
        self.discovery: Discovery = self.dynamic.resources

    @property
    def host(self) -> str:
        return str(self.api_client.configuration.host)

    @property
    def timeout(self) -> tuple[float, float]:
        return (self.config.connect_timeout, self.config.request_timeout)

    def close(self) -> None:
        self.api_client.close()
        with contextlib.suppress(Exception):
            self.api_client.rest_client.close()

    # ------------------------------------------------------------------------------ requests

    def call(
        self,
        verb: str,
        what: str,
        fn: Callable[[], T],
        *,
        idempotent: bool = True,
        policy: RetryPolicy | None = None,
    ) -> T:
        """Runs ``fn`` (one HTTP request) with retries of transient failures.

        Non-idempotent requests (``idempotent=False``, e.g. JSON patches) are repeated only when
        the previous attempt certainly did not reach the server (connect errors) or was refused
        with 429. Raises :class:`KubeError` describing ``what`` failed."""
        policy = policy or self.config.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                with request_verb(verb):
                    return fn()
            except Exception as exc:
                failure = classify(exc)
                if failure is None:
                    raise
                retryable = failure.transient and (idempotent or not failure.sent or failure.code == 429)
                if not retryable or attempt >= policy.attempts:
                    raise self.error(verb, what, failure, attempt) from exc
                delay = policy.delay(attempt, self.rng)
                if failure.retry_after is not None:
                    delay = max(delay, min(failure.retry_after, policy.cap))
                log.info(
                    "%s %s on cluster %s failed (%s), retry %d/%d in %.2fs",
                    verb,
                    what,
                    self.name,
                    _short(failure),
                    attempt,
                    policy.attempts - 1,
                    delay,
                    extra={
                        "cluster": self.name,
                        "verb": verb,
                        "target": what,
                        "code": failure.code_label,
                        "attempt": attempt,
                        "delay": round(delay, 3),
                    },
                )
                self.sleep(delay)

    def error(self, verb: str, what: str, failure: Failure, attempts: int = 1) -> KubeError:
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        msg = f'cluster "{self.name}": {verb} {what}: {_short(failure)}{tries}'
        if failure.code == 409 and failure.reason == "Conflict":
            msg += " (conflict: re-read the object and retry)"
        return KubeError(msg, failure)

    # ------------------------------------------------------------------------------ discovery

    def _fetch_json(self, path: str) -> dict[str, Any] | None:
        def fetch() -> dict[str, Any] | None:
            try:
                resp = self.dynamic.request("get", path, serialize=False, _request_timeout=self.timeout)
            except Exception as exc:
                failure = classify(exc)
                if failure is not None and failure.code == 404:
                    return None
                raise
            doc = decode(resp)
            return doc if isinstance(doc, dict) else None

        return self.call("discovery", path, fetch)

    def resource(self, api_version: str, kind: str) -> Resource:
        """The API resource of a kind (discovery, refreshed once on a miss)."""
        if not api_version or not kind:
            raise KubeError(
                f'cluster "{self.name}": apiVersion and kind are required, got {api_version!r} {kind!r}',
                transient=False,
            )
        try:
            return self.discovery.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            raise KubeError(
                f'cluster "{self.name}": the server does not serve kind {kind} in {api_version} '
                "(unknown kind, or its CRD is not installed or not established yet)",
                Failure(404, "NotFound", f"no kind {kind} in {api_version}", transient=False),
            ) from None


def _short(failure: Failure) -> str:
    code = f"HTTP {failure.code}" if failure.code else "no response"
    reason = f" {failure.reason}" if failure.reason else ""
    message = failure.message.strip().splitlines()[0] if failure.message.strip() else ""
    if len(message) > 300:
        message = message[:300] + "..."
    return f"{code}{reason}: {message}" if message else f"{code}{reason}"
