"""``chaosflow megatest -o cron``: the CronWorkflow wrapping the megatest Workflow, its flags, and
the ``chaosflow.io/sim-world`` annotation of ``-o yaml``."""

from __future__ import annotations

import json

import pytest
import yaml

from engine.cli import main
from engine.cron import load_cron_workflows_text
from engine.simworld import ANNOTATION_SIM_WORLD, parse_sim_world
from templates.library.megatest.options import MegatestOptions
from templates.library.megatest.run import sim_world_spec
from tests.megatest.conftest import ALL

FLAGS = ["--storage-classes", "a:Availability,b", "--sim-storage-nodes", "4", "--seed", "9"]


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["megatest", *FLAGS, *argv]) == 0
    return capsys.readouterr().out


def test_cron_wraps_the_workflow(capsys: pytest.CaptureFixture[str]) -> None:
    flags = [f"--{k.replace('_', '-')}" for k in ALL]
    text = _out(capsys, *flags, "-o", "cron", "--schedule", "0 2 * * *", "--timezone", "Europe/Berlin")
    assert text.startswith("# chaosflow megatest -o cron")
    (cron,) = load_cron_workflows_text(text, "cron.yaml")
    wf_doc = yaml.safe_load(_out(capsys, *flags, "-o", "yaml"))
    spec = cron.spec
    assert cron.name == "megatest"
    assert (spec.schedule, spec.timezone, spec.concurrencyPolicy) == ("0 2 * * *", "Europe/Berlin", "Forbid")
    assert spec.workflowMetadata is not None
    assert spec.workflowMetadata.labels == wf_doc["metadata"]["labels"]
    assert spec.workflowMetadata.annotations == wf_doc["metadata"]["annotations"]
    # the Workflow's spec, without its seed (each tick draws its own) ...
    assert wf_doc["spec"]["seed"] == 9 and spec.workflowSpec.seed is None
    cron_templates = {t.name: t for t in spec.workflowSpec.templates}
    assert [t["name"] for t in wf_doc["spec"]["templates"]] == list(cron_templates)
    # ... with the volume workflows named after their megatest (never an earlier night's names)
    spawn = cron_templates["volume-spawn"].model_dump(mode="json", by_alias=True, exclude_none=True)
    assert spawn["workflow"]["name"] == "{{ workflow.name }}-vol"
    for t in wf_doc["spec"]["templates"]:
        if t["name"] != "volume-spawn":
            assert cron_templates[t["name"]].model_dump(mode="json", by_alias=True, exclude_none=True) == t


def test_sim_world_annotation_names_the_world_megatest_builds(capsys: pytest.CaptureFixture[str]) -> None:
    doc = yaml.safe_load(_out(capsys, "--sim-bug", "attach_stuck", "--vm-namespace", "vms", "-o", "yaml"))
    text = doc["metadata"]["annotations"][ANNOTATION_SIM_WORLD]
    assert json.loads(text) == {
        "kind": "replicated-volumes",
        "storageClasses": ["a:Availability", "b"],
        "storageNodes": 4,
        "vmNamespace": "vms",
        "bugs": ["attach_stuck"],
    }
    o = MegatestOptions(
        storage_classes=["a:Availability", "b"],
        sim_storage_nodes=4,
        vm_namespace="vms",
        sim_bugs=["attach_stuck"],
    )
    assert parse_sim_world(text, "f", ()).world_spec() == sim_world_spec(o)


def test_real_clusters_get_no_sim_world(capsys: pytest.CaptureFixture[str]) -> None:
    text = _out(capsys, "--kubeconfig", "/k", "-o", "cron", "--schedule", "@daily")
    doc = yaml.safe_load(text)
    assert ANNOTATION_SIM_WORLD not in doc["spec"]["workflowMetadata"]["annotations"]
    assert doc["spec"]["schedule"] == "@daily" and "timezone" not in doc["spec"]


def test_policy_and_several_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    text = _out(
        capsys,
        "-o",
        "cron",
        "--schedule",
        "0 2 * * MON-FRI",
        "--schedule",
        "0 6 * * SAT",
        "--concurrency-policy",
        "Replace",
    )
    (cron,) = load_cron_workflows_text(text, "cron.yaml")
    assert (
        cron.spec.schedules == ["0 2 * * MON-FRI", "0 6 * * SAT"] and cron.spec.concurrencyPolicy == "Replace"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "cron"], "-o cron needs --schedule"),
        (["-o", "cron", "--schedule", "0 25 * * *"], "--schedule '0 25 * * *': "),
        (["-o", "cron", "--schedule", "@daily", "--timezone", "Mars/Olympus"], "--timezone: "),
        (["--schedule", "@daily"], "--schedule: only with -o cron"),
        (
            ["-o", "yaml", "--timezone", "UTC", "--concurrency-policy", "Allow"],
            "--timezone, --concurrency-policy: only with -o cron",
        ),
    ],
)
def test_invalid_cron_flags(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["megatest", *FLAGS, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert all(line.startswith("megatest: ") for line in err.strip().splitlines())
