"""A real etcd + kube-apiserver on loopback for e2e tests (the envtest convention).

``KubeAPIServer(assets_dir)`` starts etcd and kube-apiserver from the binaries in ``assets_dir``
(``etcd``, ``kube-apiserver``, ``kubectl``: ``KUBEBUILDER_ASSETS`` or the folder printed by
``hack/build-test-binaries.sh``) in a private temp folder, with freshly generated certificates,
RBAC authorization and an admin kubeconfig::

    with KubeAPIServer(assets) as kube:
        api = kube.api_client()            # kubernetes.client.ApiClient as cluster admin
        kube.kubectl("get", "ns")
        kube.restart_apiserver()           # same port, same etcd: objects survive
        kube.compact_etcd()                # later watches from older resourceVersions get 410 Gone

Both processes run in their own process groups and are killed by ``stop()`` (also on
``__exit__``, at interpreter exit, and through PR_SET_PDEATHSIG if the test process dies; the
kernel ties that signal to the thread that started the process, so start and restart the servers
from the main thread, not from a short-lived worker thread).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

BINARIES = ("etcd", "kube-apiserver", "kubectl")
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "chaosflow-admin"
POLL_INTERVAL = 0.1


class HarnessError(RuntimeError):
    """etcd or kube-apiserver could not be started, or a harness call failed."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl call exited non-zero; the message carries its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr:\n{self.stderr}"


def missing_binaries(assets_dir: Path) -> list[str]:
    """Names from BINARIES that are not executable files in ``assets_dir``."""
    return [b for b in BINARIES if not (assets_dir / b).is_file() or not os.access(assets_dir / b, os.X_OK)]


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports on 127.0.0.1 that nothing listens on right now."""
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _wait_until(
    what: str,
    ready: Callable[[], bool],
    timeout: float,
    exited: Callable[[], str | None],
    diagnose: Callable[[], str],
) -> None:
    """Polls ``ready`` every POLL_INTERVAL seconds until true. Raises HarnessError as soon as
    ``exited`` reports the awaited process gone, or after ``timeout`` with ``diagnose()``."""
    deadline = time.monotonic() + timeout
    while True:
        if ready():
            return
        if (reason := exited()) is not None:
            raise HarnessError(f"{what}: {reason}")
        if time.monotonic() >= deadline:
            raise HarnessError(f"{what}: not ready after {timeout:.0f}s\n{diagnose()}")
        time.sleep(POLL_INTERVAL)


def _load_prctl() -> Callable[..., int] | None:
    """libc's prctl, resolved in the parent so that the forked child only has to call it."""
    if sys.platform != "linux":
        return None
    try:
        import ctypes

        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    """Child side of Popen: the kernel sends SIGKILL when the test process dies, even by SIGKILL."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


class _Process:
    """A child process in its own process group, with its output appended to a log file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        self._log.write(f"\n=== {time.strftime('%H:%M:%S')} starting {' '.join(argv)}\n".encode())
        self._log.flush()
        try:
            self.popen = self._spawn(argv, cwd)
        except BaseException:
            self._log.close()
            raise

    def _spawn(self, argv: Sequence[str], cwd: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # Only a prctl() call resolved before the fork: safe enough with other threads around.
            preexec_fn=_die_with_parent if _PRCTL is not None else None,  # noqa: PLW1509
        )

    def exited(self) -> str | None:
        """None while running, else a description with the log's last lines."""
        rc = self.popen.poll()
        if rc is None:
            return None
        return f"{self.name} exited with code {rc}; {self.log_tail()}"

    def log_tail(self) -> str:
        return f"last lines of {self.log_path}:\n{_tail(self.log_path)}"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM to the whole process group, SIGKILL after ``timeout``; idempotent."""
        try:
            if self.popen.poll() is None:
                for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(self.popen.pid, sig)
                    try:
                        self.popen.wait(wait)
                        break
                    except subprocess.TimeoutExpired:
                        continue
            # Anything the process left behind in its group.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        finally:
            self._log.close()


class _PKI:
    """A throwaway CA plus the certificates and keys the cluster needs, written as PEM files."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._ca_key = ec.generate_private_key(ec.SECP256R1())
        self._ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "chaosflow-e2e-ca")])
        self._ca_ski = x509.SubjectKeyIdentifier.from_public_key(self._ca_key.public_key())
        now = dt.datetime.now(dt.UTC)
        ca = (
            x509.CertificateBuilder()
            .subject_name(self._ca_name)
            .issuer_name(self._ca_name)
            .public_key(self._ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(self._ca_ski, critical=False)
            .sign(self._ca_key, hashes.SHA256())
        )
        self.ca_cert = self._write("ca.crt", ca.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def _write(self, name: str, data: bytes) -> Path:
        path = self.dir / name
        path.write_bytes(data)
        path.chmod(0o600)
        return path

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        organizations: Sequence[str] = (),
        server: bool = False,
        hosts: Sequence[str] = (),
    ) -> tuple[Path, Path]:
        """A leaf certificate signed by the CA; returns (cert_file, key_file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attrs))
            .issuer_name(self._ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(self._ca_ski), critical=False
            )
        )
        if hosts:
            sans: list[x509.GeneralName] = []
            for h in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(h)))
                except ValueError:
                    sans.append(x509.DNSName(h))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._ca_key, hashes.SHA256())
        return (
            self._write(f"{name}.crt", cert.public_bytes(serialization.Encoding.PEM)),
            self._write(f"{name}.key", self._key_pem(key)),
        )

    def signing_key(self, name: str) -> tuple[Path, Path]:
        """An EC key pair for service-account tokens; returns (public_key_file, private_key_file)."""
        key = ec.generate_private_key(ec.SECP256R1())
        pub = key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return self._write(f"{name}.pub", pub), self._write(f"{name}.key", self._key_pem(key))


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


class KubeAPIServer:
    """etcd + kube-apiserver on 127.0.0.1 with free ports; see the module docstring."""

    _pki: _PKI | None
    _serving: tuple[Path, Path]  # apiserver serving cert, key
    _admin_cert: tuple[Path, Path]  # admin client cert, key
    _sa_keys: tuple[Path, Path]  # service-account token public, private key

    def __init__(
        self,
        assets_dir: Path | str,
        *,
        workdir: Path | str | None = None,
        startup_timeout: float = 90.0,
        apiserver_args: Sequence[str] = (),
        watch_cache: bool = False,
        keep_workdir: bool | None = None,
    ) -> None:
        """``apiserver_args`` are appended to (and so override) the default kube-apiserver flags.

        ``watch_cache`` is off by default so that watches are served by etcd: a watch from
        resourceVersion R then fails with 410 Gone exactly when etcd was compacted past R
        (``compact_etcd()``), which makes 410 handling testable on demand. With the watch cache on
        (as in production) compaction does not affect watches; instead a watch from a
        resourceVersion older than the cache's window (e.g. from before ``restart_apiserver()``)
        gets 410 "too old resource version".

        ``keep_workdir`` keeps the temp folder (certs, logs, etcd data) after stop(); it defaults to
        the env var CHAOSFLOW_KEEP_E2E_DIR being set."""
        self.assets_dir = Path(assets_dir)
        if missing := missing_binaries(self.assets_dir):
            raise HarnessError(f"{self.assets_dir} lacks the binaries {', '.join(missing)}")
        self.startup_timeout = startup_timeout
        self.extra_apiserver_args = list(apiserver_args)
        self.watch_cache = watch_cache
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="chaosflow-kube-"))
        self.keep_workdir = (
            bool(os.environ.get("CHAOSFLOW_KEEP_E2E_DIR")) if keep_workdir is None else keep_workdir
        )
        self.etcd_client_port = 0
        self.etcd_peer_port = 0
        self.secure_port = 0
        self._etcd: _Process | None = None
        self._apiserver: _Process | None = None
        self._pki: _PKI | None = None
        self._ssl: ssl.SSLContext | None = None
        self._started = False

    # ----------------------------------------------------------------------------- properties

    @property
    def url(self) -> str:
        """The API server's https URL."""
        return f"https://127.0.0.1:{self.secure_port}"

    @property
    def etcd_url(self) -> str:
        """etcd's client URL (plain http on loopback)."""
        return f"http://127.0.0.1:{self.etcd_client_port}"

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user in group system:masters)."""
        return self.workdir / "admin.kubeconfig"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def apiserver_log(self) -> Path:
        return self.workdir / "kube-apiserver.log"

    @property
    def etcd_log(self) -> Path:
        return self.workdir / "etcd.log"

    def binary(self, name: str) -> str:
        return str(self.assets_dir / name)

    # ----------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Generates the PKI, starts etcd then kube-apiserver, waits for both to be ready."""
        if self._started:
            return self
        self._started = True
        atexit.register(self.stop)
        try:
            self._make_pki()
            self._start_etcd()
            (self.secure_port,) = free_ports(1)
            self._write_kubeconfig(self.kubeconfig, ADMIN_USER, *self._admin_cert)
            self.start_apiserver()
        except BaseException:
            self._stop(keep_workdir=True)  # its logs explain the failure
            raise
        return self

    def stop(self) -> None:
        """Kills kube-apiserver and etcd (whole process groups); removes the temp folder unless kept.
        Safe to call more than once."""
        self._stop(keep_workdir=self.keep_workdir)

    def _stop(self, keep_workdir: bool) -> None:
        for proc in (self._apiserver, self._etcd):
            if proc is not None:
                proc.stop()
        self._apiserver = self._etcd = None
        atexit.unregister(self.stop)
        if self._started and self._own_workdir and not keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False

    def start_apiserver(self) -> None:
        """Starts kube-apiserver on ``secure_port`` (chosen at start()) and waits for /readyz."""
        if self._apiserver is not None and self._apiserver.exited() is None:
            raise HarnessError("kube-apiserver is already running")
        self._apiserver = _Process("kube-apiserver", self._apiserver_argv(), self.apiserver_log, self.workdir)
        proc = self._apiserver

        def diagnose() -> str:
            return f"/readyz said:\n{self._readyz_failure()}\n{proc.log_tail()}"

        _wait_until(
            f"kube-apiserver on {self.url}",
            self._apiserver_ready,
            self.startup_timeout,
            proc.exited,
            diagnose,
        )

    def stop_apiserver(self) -> None:
        """Stops kube-apiserver only (etcd keeps running): the API is unreachable until start_apiserver()."""
        if self._apiserver is not None:
            self._apiserver.stop()
            self._apiserver = None

    def restart_apiserver(self) -> None:
        """Stops and starts kube-apiserver on the same port against the same etcd."""
        self.stop_apiserver()
        self.start_apiserver()

    @property
    def apiserver_running(self) -> bool:
        return self._apiserver is not None and self._apiserver.exited() is None

    # ----------------------------------------------------------------------------- clients

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Runs kubectl against this cluster (admin kubeconfig unless another one is given)."""
        argv = [
            self.binary("kubectl"),
            f"--kubeconfig={kubeconfig or self.kubeconfig}",
            # Not ~/.kube/cache: ports are reused across runs and discovery would go stale.
            f"--cache-dir={self.workdir / 'kubectl-cache'}",
            *args,
        ]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def api_client(self, kubeconfig: Path | None = None) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig or the one given."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(kubeconfig or self.kubeconfig))

    def user_kubeconfig(self, username: str, groups: Sequence[str] = ()) -> Path:
        """A kubeconfig for a user authenticated by a client certificate (CN=username, O=groups).
        The user has no permissions until a (Cluster)RoleBinding grants some."""
        pki = self._require_pki()
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in username)
        cert, key = pki.issue(f"user-{safe}", username, organizations=groups)
        path = self.workdir / f"user-{safe}.kubeconfig"
        self._write_kubeconfig(path, username, cert, key)
        return path

    def service_account_kubeconfig(self, namespace: str, name: str, *, duration: str = "2h") -> Path:
        """Creates the ServiceAccount if missing, requests a token for it (TokenRequest API) and
        returns a kubeconfig that authenticates as system:serviceaccount:<namespace>:<name>."""
        manifest = {
            "apiVersion": "v1",
            "kind": "List",
            "items": [
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": namespace},
                },
            ],
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        token = self.kubectl(
            "create", "token", name, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        path = self.workdir / f"sa-{namespace}-{name}.kubeconfig"
        user = f"system:serviceaccount:{namespace}:{name}"
        self._write_kubeconfig(path, user, token=token)
        return path

    # ----------------------------------------------------------------------------- etcd

    def _etcd_call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """POSTs to etcd's v3 JSON gateway (e.g. ``kv/range``, ``kv/compaction``)."""
        req = urllib.request.Request(
            f"{self.etcd_url}/v3/{method}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise HarnessError(f"etcd {method} failed: HTTP {exc.code}: {detail}") from exc

    def etcd_revision(self) -> int:
        """etcd's current (cluster-wide) revision, i.e. the newest resourceVersion handed out."""
        header = self._etcd_call("kv/range", {"key": base64.b64encode(b"\0").decode()})["header"]
        return int(header["revision"])

    def compact_etcd(self, revision: int | None = None) -> int:
        """Compacts etcd's history up to ``revision`` (default: the current revision) and returns it.
        Afterwards a watch from an older resourceVersion that reaches etcd (``watch_cache=False``,
        the default) fails with 410 Gone."""
        rev = self.etcd_revision() if revision is None else revision
        try:
            self._etcd_call("kv/compaction", {"revision": str(rev), "physical": True})
        except HarnessError as exc:
            if "required revision has been compacted" not in str(exc):
                raise
        return rev

    # ----------------------------------------------------------------------------- internals

    def _require_pki(self) -> _PKI:
        if self._pki is None:
            raise HarnessError("the cluster is not started")
        return self._pki

    def _make_pki(self) -> None:
        pki = _PKI(self.workdir / "pki")
        self._pki = pki
        self._serving = pki.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            hosts=[
                "127.0.0.1",
                "localhost",
                str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts())),
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
        )
        self._admin_cert = pki.issue("admin", ADMIN_USER, organizations=["system:masters"])
        self._sa_keys = pki.signing_key("service-account")

    def _start_etcd(self) -> None:
        self.etcd_client_port, self.etcd_peer_port = free_ports(2)
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        argv = [
            self.binary("etcd"),
            "--name=e2e",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=e2e={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        self._etcd = _Process("etcd", argv, self.etcd_log, self.workdir)

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"{self.etcd_url}/readyz", timeout=2) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        etcd = self._etcd
        _wait_until(f"etcd on {self.etcd_url}", ready, self.startup_timeout, etcd.exited, etcd.log_tail)

    def _apiserver_argv(self) -> list[str]:
        pki = self._require_pki()
        serving_cert, serving_key = self._serving
        sa_pub, sa_key = self._sa_keys
        return [
            self.binary("kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # The default "lease" reconciler refuses a loopback advertise address.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.secure_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={serving_cert}",
            f"--tls-private-key-file={serving_key}",
            f"--client-ca-file={pki.ca_cert}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={sa_pub}",
            f"--service-account-signing-key-file={sa_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            # No controller-manager creates "default" ServiceAccounts, so pods would be refused.
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            "--profiling=false",
            f"--watch-cache={str(self.watch_cache).lower()}",
            *self.extra_apiserver_args,
        ]

    def _ssl_context(self) -> ssl.SSLContext:
        """TLS context that trusts the cluster CA and presents the admin client certificate."""
        if self._ssl is None:
            ctx = ssl.create_default_context(cafile=str(self._require_pki().ca_cert))
            ctx.load_cert_chain(*(str(p) for p in self._admin_cert))
            self._ssl = ctx
        return self._ssl

    def _apiserver_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2, context=self._ssl_context()) as resp:
                return bool(resp.status == 200)
        except (OSError, ssl.SSLError):
            return False

    def _readyz_failure(self) -> str:
        """What /readyz?verbose answers (the failing checks), for error messages."""
        try:
            return self.readyz()
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: {exc.read().decode(errors='replace')}"
        except (OSError, ssl.SSLError) as exc:
            return f"<no answer: {exc}>"

    def readyz(self, verbose: bool = True) -> str:
        """The body of /readyz (verbose lists each check); raises on HTTP errors."""
        suffix = "?verbose" if verbose else ""
        with urllib.request.urlopen(
            f"{self.url}/readyz{suffix}", timeout=5, context=self._ssl_context()
        ) as resp:
            return str(resp.read().decode())

    def _write_kubeconfig(
        self,
        path: Path,
        user: str,
        cert: Path | None = None,
        key: Path | None = None,
        *,
        token: str | None = None,
    ) -> None:
        creds: dict[str, str] = {}
        if cert is not None and key is not None:
            creds = {"client-certificate-data": _b64(cert), "client-key-data": _b64(key)}
        if token is not None:
            creds["token"] = token
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "e2e",
                    "cluster": {"server": self.url, "certificate-authority-data": _b64(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": creds}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
            "current-context": "e2e",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)
