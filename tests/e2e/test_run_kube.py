"""`chaosflow run FILE --kubeconfig` against a real API server; kill -9, then `chaosflow resume`."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from actors.kube import ClusterConfig, KubePlayground
from tests.e2e.test_controller import REPO, Added, chaos_objects, eventually

if TYPE_CHECKING:
    from tests.e2e.harness import KubeAPIServer

pytestmark = pytest.mark.e2e


@pytest.fixture
def pg(kube: KubeAPIServer) -> Iterator[KubePlayground]:
    playground = KubePlayground({"default": ClusterConfig(kubeconfig=kube.kubeconfig)})
    yield playground
    playground.close()


def test_run_against_a_real_cluster_then_crash_and_resume(
    kube: KubeAPIServer, pg: KubePlayground, tmp_path: Path
) -> None:
    ns = f"run-{uuid.uuid4().hex[:8]}"
    pg.create("default", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    watch = Added(pg, ns)
    doc: dict[str, Any] = {
        "apiVersion": "chaosflow.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "local", "namespace": ns},
        "spec": {
            "entry": "main",
            "templates": [
                {"name": "main", "templateType": "Serial", "children": ["hold", "after"]},
                {
                    "name": "hold",
                    "templateType": "Chaos",
                    "duration": "3s",
                    "chaos": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}},
                },
                {"name": "after", "templateType": "Suspend", "duration": "200ms"},
            ],
        },
    }
    wf_file = tmp_path / "wf.yaml"
    wf_file.write_text(json.dumps(doc))
    state = tmp_path / "run.sqlite"
    cli = [sys.executable, "-m", "engine.cli"]
    log = (tmp_path / "run.log").open("wb")
    proc = subprocess.Popen(
        [
            *cli,
            "run",
            str(wf_file),
            "--kubeconfig",
            str(kube.kubeconfig),
            "--state",
            str(state),
            "--checkpoint",
            "0",
            "--quiet",
        ],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        eventually(lambda: _has(chaos_objects(pg, ns)), timeout=30)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert len(chaos_objects(pg, ns)) == 1  # left behind by the crash, for resume to clean up
    res = subprocess.run(
        [*cli, "resume", str(state), "-o", "json"],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr + res.stdout
    out = json.loads(res.stdout)
    assert out["status"]["phase"] == "Succeed"
    assert chaos_objects(pg, ns) == []
    assert set(watch.count("ADDED").values()) == {1}
    watch.sub.stop()


def _has(items: list[str]) -> None:
    assert items
