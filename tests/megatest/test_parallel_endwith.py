"""Parallel ``endWith``: the first listed child that succeeds stops the others (they succeed)."""

from __future__ import annotations

from engine.model import Workflow
from engine.validate import validate_workflow
from tests.sim.conftest import make_sim


def _wf(end_with: list[str]) -> Workflow:
    return Workflow.model_validate(
        {
            "metadata": {"name": "endwith"},
            "spec": {
                "entry": "p",
                "templates": [
                    {
                        "name": "p",
                        "templateType": "Parallel",
                        "children": ["short", "long"],
                        "endWith": end_with,
                    },
                    {"name": "short", "templateType": "Suspend", "duration": "10s"},
                    {"name": "long", "templateType": "Suspend", "duration": "1h"},
                ],
            },
        }
    )


def test_endwith_stops_siblings_and_succeeds() -> None:
    sim = make_sim(world=False)
    run = sim.submit(_wf(["short"]))
    t0 = sim.clock.now()
    sim.run()
    assert run.phase.value == "Succeed"
    long = next(n for n in run.nodes.values() if n.template == "long")
    assert long.phase.value == "Succeed" and long.finish_time == t0 + 10


def test_endwith_must_name_a_child() -> None:
    issues = validate_workflow(_wf(["nope"]), "x.yaml")
    assert any("endWith" in str(i) for i in issues)
