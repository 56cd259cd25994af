"""WorkflowManager: bounded concurrency, many workflows, stores."""

from __future__ import annotations

from pathlib import Path

from engine.runtime import run_from_record, run_to_record
from engine.store import MemoryStore, SQLiteStore
from tests.helpers import workflow
from tests.sim.conftest import make_sim


def test_max_active_workflows_queues_the_rest() -> None:
    sim = make_sim()
    sim.manager.max_active = 2
    runs = [
        sim.submit(workflow([{"name": "z", "templateType": "Suspend", "duration": "10s"}], name=f"wf-{i}"))
        for i in range(5)
    ]
    active_seen: list[int] = []
    sim.manager.workflow_listeners.append(
        lambda r: active_seen.append(sum(1 for x in runs if x.phase.value == "Running"))
    )
    sim.run()
    assert all(r.phase.value == "Succeed" for r in runs)
    assert max(active_seen) <= 2
    starts = sorted(r.start_time for r in runs)  # type: ignore[type-var]
    assert starts[2] - starts[0] == 10 and starts[4] - starts[0] == 20


def test_many_workflows_interleave_and_all_finish() -> None:
    sim = make_sim(world=False)
    runs = [
        sim.submit(
            workflow(
                [
                    {"name": "p", "templateType": "Parallel", "children": ["a", "b"]},
                    {"name": "a", "templateType": "Suspend", "duration": {"min": "1s", "max": "1m"}},
                    {"name": "b", "templateType": "Suspend", "duration": {"min": "1s", "max": "1m"}},
                ],
                name=f"wf-{i}",
            ),
            seed=i,
        )
        for i in range(200)
    ]
    sim.run()
    assert all(r.phase.value == "Succeed" for r in runs)
    assert sim.manager.transitions == 200 * (3 + 2 * 2)  # Parallel: 3 phase changes; each Suspend: 2


def test_record_round_trip_keeps_everything_needed_to_resume() -> None:
    sim = make_sim()
    run = sim.submit(
        workflow([{"name": "z", "templateType": "Suspend", "duration": {"min": "1s", "max": "9s"}}], seed=5)
    )
    sim.run()
    back = run_from_record(run_to_record(run))
    assert run_to_record(back) == run_to_record(run)
    assert back.rng.random() == run.rng.random()


def test_memory_and_sqlite_stores(tmp_path: Path) -> None:
    mem = MemoryStore()
    sim = make_sim()
    sim.manager.store = mem
    run = sim.submit(workflow([{"name": "z", "templateType": "Suspend", "duration": "1s"}]))
    sim.run()
    assert mem.runs[run.key] is run and mem.saves >= 1

    db = SQLiteStore(tmp_path / "s.sqlite")
    db.save([run])
    db.put_meta("k", {"v": 1})
    db.close()
    db2 = SQLiteStore(tmp_path / "s.sqlite")
    (loaded,) = db2.load_all()
    assert loaded.key == run.key and loaded.phase.value == "Succeed"
    assert db2.get_meta("k") == {"v": 1}
