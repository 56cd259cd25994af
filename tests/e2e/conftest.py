"""Fixtures for e2e tests against a real etcd + kube-apiserver (see harness.py).

Binaries come from KUBEBUILDER_ASSETS, else from hack/build-test-binaries.sh (which reuses its
cache or builds them from Go modules when Go is installed). When they cannot be had, the e2e tests
are skipped with the reason, except under CHAOSFLOW_CI or CHAOSFLOW_REQUIRE_E2E, where they fail.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-test-binaries.sh"
E2E_DIR = Path(__file__).resolve().parent
# A cold build of etcd + kube-apiserver + kubectl takes ~6.5 min on 2 cores; bound it anyway.
BUILD_TIMEOUT = float(os.environ.get("CHAOSFLOW_E2E_BUILD_TIMEOUT", "3600"))


def e2e_required() -> bool:
    return bool(os.environ.get("CHAOSFLOW_CI") or os.environ.get("CHAOSFLOW_REQUIRE_E2E"))


def unavailable(reason: str) -> NoReturn:
    """Fails (CI, or CHAOSFLOW_REQUIRE_E2E) or skips (elsewhere) because e2e cannot run."""
    if e2e_required():
        pytest.fail(f"e2e prerequisites missing (CHAOSFLOW_CI/CHAOSFLOW_REQUIRE_E2E is set): {reason}")
    pytest.skip(f"e2e skipped: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/e2e carries the e2e marker, so `-m "not e2e"` deselects them."""
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


def _run_build_script(pytestconfig: pytest.Config) -> Path:
    """Runs hack/build-test-binaries.sh with its progress shown live; returns the asset folder."""
    if shutil.which("bash") is None:
        unavailable("bash is not installed, cannot run hack/build-test-binaries.sh")
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    tail: collections.deque[str] = collections.deque(maxlen=30)
    started = time.monotonic()
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        stderr, stdout = proc.stderr, proc.stdout
        assert stderr is not None and stdout is not None

        def relay() -> None:  # the script writes all its progress to stderr
            for line in stderr:
                tail.append(line.rstrip())
                if not line.startswith("go: downloading"):
                    sys.stderr.write(line)
                    sys.stderr.flush()

        relay_thread = threading.Thread(target=relay, daemon=True)
        relay_thread.start()
        try:
            while True:
                try:
                    rc = proc.wait(timeout=60)
                    break
                except subprocess.TimeoutExpired:
                    elapsed = time.monotonic() - started
                    if elapsed > BUILD_TIMEOUT:
                        raise
                    sys.stderr.write(f"build-test-binaries: still running after {elapsed:.0f}s\n")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
        relay_thread.join(timeout=10)
        out = stdout.read()
    lines = out.strip().splitlines()
    if rc != 0 or not lines:
        detail = "\n".join(tail)
        unavailable(f"hack/build-test-binaries.sh exited {rc}:\n{detail}")
    return Path(lines[-1])


@pytest.fixture(scope="session")
def kube_assets(pytestconfig: pytest.Config) -> Path:
    """Folder with etcd, kube-apiserver and kubectl."""
    from tests.e2e.harness import missing_binaries

    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env and not missing_binaries(Path(env)):
        return Path(env)
    assets = _run_build_script(pytestconfig)
    if missing := missing_binaries(assets):
        unavailable(f"{assets} lacks {', '.join(missing)} after hack/build-test-binaries.sh")
    return assets


@pytest.fixture(scope="session")
def kube(kube_assets: Path) -> Iterator[KubeAPIServer]:
    """A running etcd + kube-apiserver for the whole session, torn down at its end.
    Tests that stop or restart the API server must leave it running (use try/finally)."""
    from tests.e2e.harness import KubeAPIServer

    with KubeAPIServer(kube_assets) as server:
        yield server


def pytest_configure(config: pytest.Config) -> None:
    """Imports the harness early so that a missing dependency is reported once, clearly."""
    try:
        import tests.e2e.harness  # noqa: F401
    except ImportError as exc:  # e.g. the `cryptography` package is not installed
        config.stash[_IMPORT_ERROR] = f"cannot import tests/e2e/harness.py: {exc}"


_IMPORT_ERROR = pytest.StashKey[str]()


@pytest.fixture(scope="session", autouse=True)
def _harness_importable(pytestconfig: pytest.Config) -> None:
    if (error := pytestconfig.stash.get(_IMPORT_ERROR, None)) is not None:
        unavailable(error)
