"""Status as stored in a Workflow object: round trip for resume, and the size of a big workflow."""

from __future__ import annotations

import json
from typing import Any

from engine.kubestore import pack_rng, run_of, status_of, unpack_rng
from engine.model import Workflow
from engine.runner import RunOptions, build_sim_env

#: etcd's default request limit is 1.5 MiB; a Workflow must stay well under it
OBJECT_LIMIT = 1_572_864


def _big_workflow(children: int) -> Workflow:
    names = [f"step-{i:04d}" for i in range(children)]
    templates: list[dict[str, Any]] = [{"name": "main", "templateType": "Parallel", "children": names}]
    for i, n in enumerate(names):
        if i % 2:
            templates.append({"name": n, "templateType": "Suspend", "duration": "1s"})
        else:
            templates.append(
                {
                    "name": n,
                    "templateType": "Chaos",
                    "duration": "2s",
                    "chaos": {"manifest": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}}},
                }
            )
    return Workflow.model_validate(
        {
            "metadata": {"name": "big-campaign", "namespace": "default"},
            "spec": {"entry": "main", "templates": templates},
        }
    )


def _run(wf: Workflow) -> Any:
    env = build_sim_env(RunOptions(progress=False), seed=1)
    run = env.manager.submit(wf)
    env.manager.run()
    return run


def test_1000_node_workflow_status_is_well_under_the_object_limit() -> None:
    run = _run(_big_workflow(999))
    assert len(run.nodes) == 1000 and run.phase.value == "Succeed"
    status = status_of(run, revision=7)
    obj = {**run.workflow.model_dump(mode="json", exclude_none=True), "status": status}
    size = len(json.dumps(obj, separators=(",", ":")))
    print(f"1,000-node Workflow object: {size} bytes ({size / OBJECT_LIMIT:.0%} of 1.5 MiB)")
    assert size < OBJECT_LIMIT / 2


def test_status_round_trip_restores_the_run() -> None:
    run = _run(_big_workflow(3))
    status = status_of(run, revision=3)
    obj = {
        **run.workflow.model_dump(mode="json", exclude_none=True),
        "metadata": {
            "name": "big-campaign",
            "namespace": "default",
            "uid": "u1",
            "resourceVersion": "9",
        },
        "status": json.loads(json.dumps(status)),
    }
    back = run_of(obj)
    assert back.phase is run.phase and back.node_counter == run.node_counter
    assert back.rng.getstate() == run.rng.getstate()
    assert set(back.nodes) == set(run.nodes)
    for name, n in run.nodes.items():
        b = back.nodes[name]
        assert (b.phase, b.children, b.state, b.parent) == (n.phase, n.children, n.state, n.parent)
        assert b.start_time is not None and abs(b.start_time - (n.start_time or 0)) < 1e-3


def test_fresh_object_gives_a_fresh_run() -> None:
    wf = _big_workflow(1)
    run = run_of({**wf.model_dump(mode="json", exclude_none=True), "status": {"phase": "Failed"}})
    assert run.phase.value == "Init" and not run.nodes


def test_rng_packing() -> None:
    import random

    r = random.Random(42)
    r.random()
    assert unpack_rng(json.loads(json.dumps(pack_rng(r.getstate())))) == r.getstate()
