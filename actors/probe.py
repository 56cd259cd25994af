"""HTTP probes (StatusCheck ``type: HTTP``): the ``probe.http`` actor.

A probe never raises for what the probed service does: a response of any status is
``{"statusCode": N}``, and a network failure (no such host, connection refused, timeout) is
``{"error": "..."}``; the StatusCheck judges both against its criteria. Real URLs go through
``urllib.request`` with the probe's timeout.

On the simulated cluster a URL whose host is a Kubernetes service name,
``http://<service>.<namespace>.svc[.cluster.local][:port]/...``, is answered from the Service
object, without a network (``.svc.<cluster>`` picks another simulated cluster by name):

- no such Service: ``no such host``;
- annotation ``sim.chaosflow.io/http-status: "503"``: that status code;
- otherwise, a Service with a ``spec.selector`` answers 200 while at least one matching pod is
  Running and Ready, and refuses the connection when none is (like a Service without endpoints);
  a Service without a selector answers 200;
- annotation ``sim.chaosflow.io/http-latency: "2s"``: a latency at or above the probe's timeout is
  a timeout (below it the answer is immediate: the simulation does not spend virtual time);
- annotation ``sim.chaosflow.io/http-body``: the response body.

Tests and worlds flip a service's health by patching the annotation, or by killing its pods.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any
from urllib.parse import urlsplit

from actors.base import Playground

ANNOTATION_STATUS = "sim.chaosflow.io/http-status"
ANNOTATION_LATENCY = "sim.chaosflow.io/http-latency"
ANNOTATION_BODY = "sim.chaosflow.io/http-body"
MAX_BODY = 1024  # bytes of the response body kept in the result


def probe_http(pg: Playground, p: dict[str, Any]) -> dict[str, Any]:
    """``{url, method, headers, body, timeout, seq}`` -> ``{statusCode | error, body?, seq}``."""
    url = str(p["url"])
    method = str(p.get("method") or "GET").upper()
    headers = _headers(p.get("headers") or {})
    body = p.get("body")
    timeout = float(p.get("timeout") or 1.0)
    serve = getattr(pg, "http", None)
    result = serve(method, url, headers, body, timeout) if callable(serve) else None
    if result is None:
        result = urllib_request(method, url, headers, body, timeout)
    return {**result, "seq": p.get("seq")}


def _headers(h: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in h.items():
        out[str(k)] = ", ".join(str(x) for x in v) if isinstance(v, list) else str(v)
    return out


def urllib_request(
    method: str, url: str, headers: dict[str, str], body: str | None, timeout: float
) -> dict[str, Any]:
    data = body.encode() if body else None
    try:
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return {"statusCode": int(resp.status), "body": _text(resp.read(MAX_BODY))}
    except urllib.error.HTTPError as e:  # a response, just not a 2xx one
        try:
            text = _text(e.read(MAX_BODY))
        except Exception:
            text = ""
        return {"statusCode": int(e.code), "body": text}
    except urllib.error.URLError as e:
        return {"error": f"{method} {url}: {e.reason}"}
    except TimeoutError:
        return {"error": f"{method} {url}: timeout after {timeout:g}s"}
    except (OSError, ValueError) as e:
        return {"error": f"{method} {url}: {type(e).__name__}: {e}"}


def _text(b: bytes) -> str:
    return b.decode("utf-8", errors="replace")


# --- the simulated cluster's answers ---------------------------------------------------------------
def service_of(url: str, clusters: list[str]) -> tuple[str, str, str] | None:
    """(cluster, namespace, service) for a cluster-DNS URL, or None for any other URL."""
    host = (urlsplit(url).hostname or "").lower()
    parts = host.split(".")
    if len(parts) < 3 or parts[2] != "svc" or not parts[0] or not parts[1]:
        return None
    rest = parts[3:]
    if not rest or rest == ["cluster", "local"]:
        return "default", parts[1], parts[0]
    if rest[0] in clusters:
        return rest[0], parts[1], parts[0]
    return None


def _ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or [] if isinstance(c, dict)}
    return conds.get("Ready", "True") == "True"


def serve_from_services(
    pg: Playground, method: str, url: str, headers: dict[str, str], body: str | None, timeout: float
) -> dict[str, Any] | None:
    """Answer ``url`` from a simulated Service (see the module docstring); None = not a service URL."""
    from engine.duration import parse_duration

    target = service_of(url, pg.clusters())
    if target is None:
        return None
    cluster, namespace, name = target
    host = urlsplit(url).hostname
    svc = pg.get(cluster, "v1", "Service", namespace, name)
    if svc is None:
        return {"error": f"{method} {url}: dial tcp: lookup {host}: no such host"}
    ann = (svc.get("metadata") or {}).get("annotations") or {}
    latency = ann.get(ANNOTATION_LATENCY)
    if latency:
        try:
            seconds = parse_duration(latency)
        except ValueError:
            seconds = 0.0
        if seconds >= timeout:
            return {"error": f"{method} {url}: timeout after {timeout:g}s"}
    answer_body = str(ann.get(ANNOTATION_BODY, ""))
    status = ann.get(ANNOTATION_STATUS)
    if status is not None:
        try:
            return {"statusCode": int(status), "body": answer_body}
        except ValueError:
            return {
                "error": f"{method} {url}: service {namespace}/{name}: bad {ANNOTATION_STATUS} {status!r}"
            }
    selector = (svc.get("spec") or {}).get("selector")
    if selector:
        sel = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        pods = pg.list(cluster, "v1", "Pod", namespace, sel)
        if not any(_ready(p) for p in pods):
            return {"error": f"{method} {url}: dial tcp {host}: connection refused (no ready endpoints)"}
    return {"statusCode": 200, "body": answer_body}
