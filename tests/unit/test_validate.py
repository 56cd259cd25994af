"""`chaosflow validate`: every problem is one path-precise line, exit code 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import InputError, ValidationFailed
from engine.loader import load_workflows_text

ROOT = Path(__file__).resolve().parents[2]

HEAD = """apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata: {name: wf}
spec:
"""


def issues_of(text: str) -> list[str]:
    with pytest.raises((ValidationFailed, InputError)) as ei:
        load_workflows_text(text, "wf.yaml")
    err = ei.value
    if isinstance(err, ValidationFailed):
        return [str(i) for i in err.issues]
    return [str(err)]


def wf(body: str) -> str:
    return HEAD + body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "  entry: nope\n  templates:\n    - {name: a, templateType: Suspend, duration: 1s}\n",
            'wf.yaml: spec.entry: unknown template "nope"',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Serial, children: [b, foo]}\n"
            "    - {name: b, templateType: Suspend, duration: 1s}\n",
            'wf.yaml: spec.templates[0].children[1]: unknown template "foo"',
        ),
        (
            "  entry: a\n  templates:\n    - name: a\n      templateType: Task\n"
            "      task: {container: {image: busybox}}\n"
            "      conditionalBranches: [{target: ghost, expression: 'exitCode == 0'}]\n",
            'wf.yaml: spec.templates[0].conditionalBranches[0].target: unknown template "ghost"',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Serial, children: [b]}\n"
            "    - {name: b, templateType: Serial, children: [a]}\n",
            "wf.yaml: spec.templates[0]: cycle: a -> b -> a",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend, duration: 1s}\n"
            "    - {name: lonely, templateType: Suspend, duration: 1s}\n",
            'wf.yaml: spec.templates[1]: template "lonely" is unreachable from entry "a"',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Serial, children: [b]}\n"
            "    - {name: b, templateType: Suspend, duration: 1s}\n"
            "    - {name: b, templateType: Suspend, duration: 2s}\n",
            'wf.yaml: spec.templates[2].name: duplicate template name "b" (first at spec.templates[1])',
        ),
        (
            "  entry: Bad_Name\n  templates:\n    - {name: Bad_Name, templateType: Suspend, duration: 1s}\n",
            'wf.yaml: spec.templates[0].name: invalid template name "Bad_Name": must be a lowercase RFC 1123 label',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend}\n",
            "wf.yaml: spec.templates[0].duration: Suspend template needs a duration",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Task, task: {}}\n",
            "wf.yaml: spec.templates[0].task.container: Task template needs a container",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Task}\n",
            "wf.yaml: spec.templates[0].task: Task template needs task.container",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend, duration: 5 minutes}\n",
            'wf.yaml: spec.templates[0].duration: invalid duration "5 minutes"',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend, duration: {min: 30s, max: 10s}}\n",
            "wf.yaml: spec.templates[0].duration:",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: NetworkChaos, networkChaos: {action: delay}}\n",
            "wf.yaml: spec.templates[0].duration: chaos needs a duration",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend, duration: 1s, children: [a]}\n",
            "wf.yaml: spec.templates[0].children: not used by templateType Suspend",
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Bogus}\n",
            'wf.yaml: spec.templates[0].templateType: unknown templateType "Bogus"',
        ),
        (
            "  entry: a\n  templates:\n    - {name: a, templateType: Suspend, duration: 1s, color: red}\n",
            "wf.yaml: spec.templates[0].color: unknown field",
        ),
        (
            "  entry: a\n  templates:\n    - name: a\n      templateType: Task\n"
            "      task: {container: {image: busybox}}\n"
            "      conditionalBranches: [{target: a, expression: 'exitCode =='}]\n",
            "wf.yaml: spec.templates[0].conditionalBranches[0].expression:",
        ),
        ("  templates: []\n", "wf.yaml: spec.entry: required"),
    ],
)
def test_each_problem_is_reported_with_its_path(body: str, expected: str) -> None:
    found = issues_of(wf(body))
    assert any(line.startswith(expected) for line in found), found


def test_wrong_api_version_and_kind() -> None:
    found = issues_of("apiVersion: argoproj.io/v1alpha1\nkind: Pipeline\nspec: {}\n")
    assert any(
        line.startswith("wf.yaml: apiVersion: unsupported apiVersion 'argoproj.io/v1alpha1'")
        for line in found
    )
    assert any(line.startswith("wf.yaml: kind: unsupported kind 'Pipeline'") for line in found)


def test_all_problems_reported_at_once() -> None:
    body = (
        "  entry: a\n  templates:\n    - {name: a, templateType: Serial, children: [b, foo]}\n"
        "    - {name: b, templateType: Suspend, duration: 1x}\n"
        "    - {name: c, templateType: Task, task: {}}\n"
    )
    found = issues_of(wf(body))
    assert len(found) >= 3, found


def test_alias_bomb_is_rejected_quickly() -> None:
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    found = issues_of("\n".join(lines) + "\n")
    assert len(found) == 1 and found[0].startswith("wf.yaml")


def test_deep_nesting_is_rejected() -> None:
    found = issues_of("[" * 5000 + "]" * 5000)
    assert len(found) == 1 and "nest" in found[0].lower()


def test_syntax_error_names_the_line() -> None:
    found = issues_of(HEAD + "  entry: [unclosed\n")
    assert len(found) == 1 and "line" in found[0]


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = ROOT / "examples" / "quickstart.yaml"
    assert main(["validate", str(good)]) == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(wf("  entry: a\n  templates:\n    - {name: a, templateType: Serial, children: [foo]}\n"))
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f'{bad}: spec.templates[0].children[0]: unknown template "foo"' in err
    assert "Traceback" not in err


def test_cli_validate_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "/nonexistent/wf.yaml"]) == 2
    assert "/nonexistent/wf.yaml: cannot read file" in capsys.readouterr().err


def test_cli_never_prints_a_traceback_on_garbage(tmp_path: Path) -> None:
    f = tmp_path / "garbage.yaml"
    f.write_bytes(b"\xff\xfe\x00garbage: [\x00")
    proc = subprocess.run(
        [sys.executable, "-m", "engine.cli", "validate", str(f)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith(str(f))


def test_every_example_validates() -> None:
    files = sorted((ROOT / "examples").rglob("*.yaml"))
    assert files
    from engine.cron import validate_cron_file

    for f in files:
        if validate_cron_file(str(f)) is None:  # a CronWorkflow file is validated by the cron loader
            load_workflows_text(f.read_bytes(), str(f))


def test_sim_world_annotation_is_validated_in_workflows_and_cron_workflows() -> None:
    from engine.cron import load_cron_workflows_text

    bad = '\'{"kind":"replicated-volumes","storageClasses":["a",3],"bugs":["nope"]}\''
    text = f"""apiVersion: chaosflow.io/v1alpha1
kind: Workflow
metadata:
  name: wf
  annotations:
    chaosflow.io/sim-world: {bad}
spec:
  entry: s
  templates: [{{name: s, templateType: Suspend, deadline: 1s, duration: 1s}}]
"""
    at = 'wf.yaml: metadata.annotations["chaosflow.io/sim-world"]'
    assert issues_of(text) == [
        f"{at}.storageClasses[1]: expected a string, got int",
        f'{at}.bugs[0]: unknown bug "nope" (known: ' + issues_of(text)[1].split("(known: ", 1)[1],
    ]
    cron = """apiVersion: chaosflow.io/v1alpha1
kind: CronWorkflow
metadata: {name: nightly}
spec:
  schedule: "@daily"
  workflowMetadata:
    annotations:
      chaosflow.io/sim-world: '{"kind":"other"}'
  workflowSpec:
    entry: s
    templates: [{name: s, templateType: Suspend, duration: 1s}]
"""
    with pytest.raises(ValidationFailed) as ei:
        load_cron_workflows_text(cron, "c.yaml")
    got = [str(i) for i in ei.value.issues]
    at = 'c.yaml: spec.workflowMetadata.annotations["chaosflow.io/sim-world"]'
    assert f"{at}.kind: unknown kind 'other' (known: replicated-volumes)" in got, got
    assert any(g.startswith(f"{at}.storageClasses: required") for g in got), got
