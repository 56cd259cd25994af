"""The ``probe.http`` actor: real requests through urllib, and the simulated cluster's answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from actors.base import run_action
from actors.probe import probe_http, service_of
from actors.sim.playground import SimWorld
from engine.clock import VirtualClock
from triggers.operable import OperableTrigger


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        code = int(self.path.strip("/") or 200)
        body = f"code {code}".encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length") or 0)
        got = self.rfile.read(n)
        body = f"{self.headers.get('X-Test')}:{got.decode()}".encode()
        self.send_response(201)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


class NoHTTP:
    """A playground without an ``http`` method: every URL goes to the network."""


def test_real_requests_through_urllib(server: str) -> None:
    pg: Any = NoHTTP()
    assert probe_http(pg, {"url": f"{server}/200", "seq": 4}) == {
        "statusCode": 200,
        "body": "code 200",
        "seq": 4,
    }
    assert probe_http(pg, {"url": f"{server}/503"})["statusCode"] == 503  # a response, not an error
    res = probe_http(
        pg, {"url": server, "method": "POST", "headers": {"X-Test": ["a", "b"]}, "body": "hi", "timeout": 2}
    )
    assert res["statusCode"] == 201 and res["body"] == "a, b:hi"


def test_network_errors_are_results_not_exceptions() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    res = probe_http(NoHTTP(), {"url": f"http://127.0.0.1:{port}/", "timeout": 1})  # type: ignore[arg-type]
    assert set(res) == {"error", "seq"} and "refused" in res["error"].lower()
    res = probe_http(NoHTTP(), {"url": "not a url"})  # type: ignore[arg-type]
    assert "error" in res


def test_service_urls() -> None:
    assert service_of("http://web.default.svc/healthz", ["default"]) == ("default", "default", "web")
    assert service_of("http://web.apps.svc.cluster.local:8080/", ["default"]) == ("default", "apps", "web")
    assert service_of("http://web.apps.svc.parent/", ["default", "parent"]) == ("parent", "apps", "web")
    assert service_of("http://web.apps.svc.elsewhere/", ["default"]) is None
    assert service_of("https://example.com/", ["default"]) is None
    assert service_of("http://web.default/", ["default"]) is None


def test_the_simulated_cluster_answers_from_services() -> None:
    clock = VirtualClock()
    world = SimWorld(clock, OperableTrigger(clock))
    api = world.clusters["default"].api
    pg = world.playground

    def probe(url: str, timeout: float = 1.0) -> dict[str, Any]:
        return dict(run_action(pg, "probe.http", {"url": url, "timeout": timeout}))

    assert "no such host" in probe("http://web.default.svc/")["error"]
    api.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "plain"}, "spec": {}})
    assert probe("http://plain.default.svc/")["statusCode"] == 200
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}},
        }
    )
    assert "no ready endpoints" in probe("http://web.default.svc/")["error"]
    api.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web-0", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "nginx"}]},
        }
    )
    api.patch_status(
        "Pod", "web-0", {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    )
    assert probe("http://web.default.svc.cluster.local/")["statusCode"] == 200
    api.patch(
        "Service",
        "web",
        {
            "metadata": {
                "annotations": {
                    "sim.chaosflow.io/http-status": "503",
                    "sim.chaosflow.io/http-body": "down",
                    "sim.chaosflow.io/http-latency": "1500ms",
                }
            }
        },
    )
    assert probe("http://web.default.svc/", timeout=2) == {"statusCode": 503, "body": "down", "seq": None}
    assert "timeout after 1s" in probe("http://web.default.svc/", timeout=1)["error"]
