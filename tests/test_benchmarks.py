"""The benchmarks' shared harness (benchmarks/common.py): how a ratio is measured and how a report
names the machine. No timing is asserted (speed belongs in the benchmarks' reports)."""

import torch

from benchmarks.common import INSTRUCTION_SETS, environment, instruction_sets, machine, timed_ratio


def test_timed_ratio_alternates_the_sides_and_measures_each_alike():
    calls = {"measured": 0, "baseline": 0}
    order = []

    def side(name):
        def call():
            if not order or order[-1] != name:
                order.append(name)
            calls[name] += 1

        return call

    timing = timed_ratio(side("measured"), side("baseline"), rounds=3, min_run_time=0.001)
    # rounds alternate which side goes first: m b | b m | m b
    assert order == ["measured", "baseline", "measured", "baseline"]
    descriptions = [m.description for m in timing.measurements]
    assert descriptions == ["measured", "baseline", "baseline", "measured", "measured", "baseline"]
    assert all(m.task_spec.num_threads == torch.get_num_threads() for m in timing.measurements)
    assert calls["measured"] > 3 and calls["baseline"] > 3  # blocks of calls, after a sizing run
    medians = {side: sorted(m.median for m in timing.measurements if m.description == side) for side in calls}
    assert timing.seconds == medians["measured"][1] and timing.baseline_seconds == medians["baseline"][1]
    assert timing.ratio > 0


def test_reports_name_the_cpu_and_its_instruction_sets():
    found = instruction_sets()
    assert set(found) <= set(INSTRUCTION_SETS)
    env = environment("cpu")
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert env["instruction_sets"] == found
    assert machine(env).startswith(f"torch CPU capability {env['cpu_capability']}, ")
    assert machine({"device": "old report"}) == "instruction sets not recorded"


def test_reports_hold_paths_relative_to_the_repository(tmp_path):
    from benchmarks.common import REPO, write_report

    data = REPO / "data-bin" / "multi30k.en-de"
    env = {**environment("cpu"), "command": f"python -m benchmarks.bench_x --data {data}"}
    write_report(
        "x", "A report", env, [("data", "data")], [{"data": str(data)}], notes=f"Data {data}.", directory=tmp_path
    )
    for report in (tmp_path / "x.md", tmp_path / "x.json"):
        text = report.read_text()
        assert str(REPO) not in text and "data-bin/multi30k.en-de" in text
