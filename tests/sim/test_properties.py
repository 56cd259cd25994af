"""Property: random trees of Serial / Parallel / Suspend / Chaos / Loop / Switch with random
deadlines and random abort times always terminate on the virtual clock and leave no chaos object
(and no observer) behind."""

from __future__ import annotations

from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.validate import validate_workflow
from tests.helpers import workflow
from tests.sim.conftest import make_sim

MAX_DEPTH = 4
MAX_EVENTS = 200_000
DURATIONS = st.sampled_from(["0s", "1s", "5s", "30s", "2m", {"min": "1s", "max": "1m"}])
DEADLINES = st.one_of(
    st.none(),
    st.none(),
    st.tuples(st.sampled_from(["3s", "15s", "1m", "4m"]), st.sampled_from(["Fail", "Succeed"])),
)
CONDITIONS = st.sampled_from(
    ["true", "false", "iteration.index % 2 == 0", "rand() < 0.5", "nodes.size() > 1", "undefinedThing"]
)


class _Tree:
    def __init__(self) -> None:
        self.templates: list[dict[str, Any]] = []

    def add(self, kind: str, body: dict[str, Any], deadline: tuple[str, str] | None) -> str:
        name = f"t{len(self.templates)}"
        t: dict[str, Any] = {"name": name, "templateType": kind, **body}
        if deadline is not None:
            t["deadline"], t["onDeadline"] = deadline
        self.templates.append(t)
        return name


@st.composite
def trees(draw: st.DrawFn) -> tuple[list[dict[str, Any]], str | None]:
    tree = _Tree()
    leaf_kinds = ["Suspend", "Chaos", "NetworkChaos", "PodKill"]
    inner_kinds = ["Serial", "Parallel", "Loop", "Switch"]

    def node(depth: int, bounded_above: bool) -> str:
        if depth >= MAX_DEPTH:
            kinds = leaf_kinds
        elif depth < 2:
            kinds = inner_kinds
        else:
            kinds = leaf_kinds + inner_kinds
        kind = draw(st.sampled_from(kinds))
        deadline = draw(DEADLINES)
        bounded = bounded_above or deadline is not None
        if kind == "Suspend":
            return tree.add("Suspend", {"duration": draw(DURATIONS)}, deadline)
        if kind == "Chaos":
            manifest = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"chaos": "yes"}}
            return tree.add("Chaos", {"duration": draw(DURATIONS), "chaos": {"manifest": manifest}}, deadline)
        if kind == "NetworkChaos":
            spec = {
                "action": "delay",
                "mode": "all",
                "selector": {"labelSelectors": {"app": "web"}},
                "delay": {"latency": "10ms"},
            }
            return tree.add("NetworkChaos", {"duration": draw(DURATIONS), "networkChaos": spec}, deadline)
        if kind == "PodKill":
            spec = {"action": "pod-kill", "mode": "one", "selector": {"labelSelectors": {"app": "web"}}}
            return tree.add("PodChaos", {"podChaos": spec}, deadline)
        if kind in ("Serial", "Parallel"):
            children = [node(depth + 1, bounded) for _ in range(draw(st.integers(1, 3)))]
            return tree.add(kind, {"children": children}, deadline)
        if kind == "Switch":
            targets = [node(depth + 1, bounded) for _ in range(draw(st.integers(1, 3)))]
            if draw(st.booleans()):
                cases = [{"when": draw(CONDITIONS), "target": t} for t in targets]
                spec: dict[str, Any] = {"cases": cases, "mode": draw(st.sampled_from(["first", "all"]))}
            else:
                spec = {"weights": [{"target": t, "weight": draw(st.integers(1, 3))} for t in targets]}
                spec["weights"].append({"weight": 1})
            return tree.add("Switch", {"switch": spec}, deadline)
        # Loop
        loop: dict[str, Any] = {"historyLimit": draw(st.integers(0, 3))}
        bound = draw(st.sampled_from(["count", "until", "while", "max", "none"]))
        if bound == "count":
            loop["count"] = draw(st.integers(0, 3))
        elif bound == "until":
            loop["until"] = "iteration.number >= 2"
        elif bound == "while":
            loop["while"] = "iteration.index < 2"
        elif bound == "max":
            loop["maxIterations"] = draw(st.integers(1, 3))
        elif not bounded:  # would never end: give it a lifetime
            deadline = (draw(st.sampled_from(["15s", "1m"])), "Succeed")
        loop["child"] = node(depth + 1, bounded or deadline is not None)
        if draw(st.booleans()):
            loop["interval"] = draw(DURATIONS)
        loop["continueOnFailure"] = draw(st.booleans())
        return tree.add("Loop", {"loop": loop}, deadline)

    entry = node(0, False)
    ordered = sorted(tree.templates, key=lambda t: t["name"] != entry)
    return ordered, draw(st.sampled_from([None, None, "10m"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tree=trees(),
    abort_at=st.one_of(st.none(), st.floats(0.05, 300), st.sampled_from([0.1, 0.15, 30.1, 120.2])),
    seed=st.integers(0, 3),
)
def test_random_trees_terminate_and_leave_no_chaos(
    tree: tuple[list[dict[str, Any]], str | None], abort_at: float | None, seed: int
) -> None:
    templates, wf_deadline = tree
    spec: dict[str, Any] = {"seed": seed}
    if wf_deadline is not None:
        spec["deadline"] = wf_deadline
    wf = workflow(templates, **spec)
    assert validate_workflow(wf, "wf.yaml") == []
    sim = make_sim(seed)
    with mock.patch("templates.loop.MAX_INSTANT_ITERATIONS", 100):
        run = sim.submit(wf)
        if abort_at is not None:
            sim.at(abort_at, lambda: sim.manager.abort(run.key))
        sim.manager.run(max_events=MAX_EVENTS)  # a livelock fails the test instead of hanging it
    assert run.phase.finished, f"the run got stuck or spins ({sim.manager.events} events)"
    assert all(n.phase.finished for n in run.nodes.values())
    assert sim.chaos_objects() == []
    assert sim.labelled("ConfigMap") == []
    assert sim.manager.watch.observed() == 0 and sim.manager.watch.observed_sets() == 0
    assert run.start_time is not None and run.finish_time is not None
    if abort_at is not None:
        assert run.finish_time - run.start_time <= abort_at + 1.0
