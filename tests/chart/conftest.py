"""Fixtures for the Helm chart tests (charts/chaosflow).

helm and kubeconform come from CHART_TOOLS_ASSETS, else from hack/build-chart-tools.sh (which
reuses its cache or builds them from the Go modules in hack/tools/{helm,kubeconform}). When they
cannot be had the tests are skipped with the reason, except under CHAOSFLOW_CI or
CHAOSFLOW_REQUIRE_E2E, where they fail (the same rule as tests/e2e).

The tests that need the real API server (kubeconform schemas from its /openapi/v2, apply,
`kubectl auth can-i`) use the e2e harness's session fixture ``kube`` and carry the ``e2e`` marker.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

# The e2e harness's session fixtures (one etcd + kube-apiserver for the chart tests).
from tests.e2e.conftest import kube, kube_assets, unavailable  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "chaosflow"
ALL_VALUES = CHART / "ci" / "all-values.yaml"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BUILD_SCRIPT = REPO_ROOT / "hack" / "build-chart-tools.sh"
TOOLS = ("helm", "kubeconform")
BUILD_TIMEOUT = float(os.environ.get("CHAOSFLOW_CHART_BUILD_TIMEOUT", "1800"))


def _has_tools(folder: Path) -> bool:
    return all(os.access(folder / t, os.X_OK) for t in TOOLS)


@pytest.fixture(scope="session")
def chart_tools() -> Path:
    """Folder holding helm and kubeconform."""
    env = os.environ.get("CHART_TOOLS_ASSETS")
    if env and _has_tools(Path(env)):
        return Path(env)
    if shutil.which("bash") is None:
        unavailable("bash is not installed, cannot run hack/build-chart-tools.sh")
    try:
        proc = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=False,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired:
        unavailable(f"hack/build-chart-tools.sh did not finish within {BUILD_TIMEOUT:.0f}s")
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines or not _has_tools(Path(lines[-1])):
        tail = "\n".join(proc.stderr.strip().splitlines()[-30:])
        unavailable(f"hack/build-chart-tools.sh exited {proc.returncode}:\n{tail}")
    return Path(lines[-1])


class Helm:
    """Runs the built helm with its config, cache and data folders kept out of $HOME."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=self.env, timeout=120, check=False
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"helm {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
            )
        return result

    def template(
        self,
        *values_files: Path,
        set_values: Sequence[str] = (),
        release: str = "chaosflow",
        namespace: str = "chaosflow-system",
        include_crds: bool = False,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        args = ["template", release, str(CHART), "--namespace", namespace]
        for f in values_files:
            args += ["-f", str(f)]
        for s in set_values:
            args += ["--set", s]
        if include_crds:
            args.append("--include-crds")
        return self.run(*args, check=check)

    def render(self, *values_files: Path, **kwargs: Any) -> list[dict[str, Any]]:
        out = self.template(*values_files, **kwargs).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="session")
def helm(chart_tools: Path, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm(chart_tools / "helm", tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def render(helm: Helm) -> Callable[..., list[dict[str, Any]]]:
    return helm.render
