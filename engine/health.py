"""The controller's HTTP endpoints: ``/healthz`` (alive), ``/readyz`` (ready) and ``/metrics``.

``/metrics`` serves prometheus_client's default registry, so any module may register metrics.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

log = logging.getLogger("chaosflow.health")

Check = Callable[[], tuple[bool, str]]


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingServer(WSGIServer):
    daemon_threads = True

    def process_request(self, request: Any, client_address: Any) -> None:
        t = threading.Thread(target=self._handle, args=(request, client_address), daemon=True)
        t.start()

    def _handle(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)


def parse_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host or "0.0.0.0", int(port)


class HealthServer:
    def __init__(self, addr: str, healthy: Check, ready: Check) -> None:
        self.healthy = healthy
        self.ready = ready
        metrics = make_wsgi_app()

        def app(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/metrics":
                return metrics(environ, start)
            if path in ("/healthz", "/livez", "/readyz"):
                ok, why = (self.ready if path == "/readyz" else self.healthy)()
                body = (("ok" if ok else "not ok") + (f": {why}" if why else "") + "\n").encode()
                start(
                    "200 OK" if ok else "503 Service Unavailable",
                    [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
                )
                return [body]
            start("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]

        host, port = parse_addr(addr)
        self.server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_Quiet)
        self.port = self.server.server_port
        self._thread = threading.Thread(target=self.server.serve_forever, name="chaosflow-http", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("serving /healthz /readyz /metrics on port %d", self.port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
