"""``pytest --cost-report FILE``: what each test costs, one JSON line per test as it ends; ``python
tests/cost_report.py FILE`` makes the tables of docs/testing.md from it.

Per test (its setup, call and teardown, so a fixture's cost lands on the first test that uses it):
wall seconds, CPU seconds of this process and of the child processes that ended meanwhile (CPU time
stays honest on a loaded machine, where wall time does not), and the processes this one started.
"""

import json
import resource
import subprocess
import time

import pytest

_started = {"processes": 0}


def pytest_addoption(parser):
    parser.addoption(
        "--cost-report", metavar="FILE", help="write each test's wall and CPU seconds to FILE (JSON lines)"
    )


def pytest_configure(config):
    if not config.getoption("--cost-report"):
        return
    popen_init = subprocess.Popen.__init__

    def counting_init(self, *args, **kwargs):
        _started["processes"] += 1
        popen_init(self, *args, **kwargs)

    subprocess.Popen.__init__ = counting_init
    # under pytest-xdist the workers append to the file that the controller started afresh
    worker = getattr(config, "workerinput", {}).get("workerid")
    config._cost_report = open(config.getoption("--cost-report"), "a" if worker else "w")
    config._cost_worker = worker


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    report = getattr(item.config, "_cost_report", None)
    if report is None:
        yield
        return
    before = (time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _started["processes"])
    yield
    after = (time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _started["processes"])
    wall, cpu_self, cpu_children, processes = (b - a for a, b in zip(before, after))
    costs = {"wall_s": wall, "cpu_self_s": cpu_self, "cpu_children_s": cpu_children}
    row = {"test": item.nodeid, **{key: round(value, 2) for key, value in costs.items()}, "processes": processes}
    if item.config._cost_worker:
        row["worker"] = item.config._cost_worker
    report.write(json.dumps(row) + "\n")  # one write of one line: the workers' lines never interleave
    report.flush()


def pytest_unconfigure(config):
    if hasattr(config, "_cost_report"):
        config._cost_report.close()


def tables(rows: list, top: int = 40) -> str:
    """Markdown: the totals, then each module and the ``top`` costliest tests, by CPU seconds."""
    cpu = lambda row: row["cpu_self_s"] + row["cpu_children_s"]  # noqa: E731
    modules = {}
    for row in rows:
        module = modules.setdefault(row["test"].split("::")[0], {"tests": 0, "cpu": 0.0, "wall": 0.0, "processes": 0})
        module["tests"] += 1
        module["cpu"] += cpu(row)
        module["wall"] += row["wall_s"]
        module["processes"] += row["processes"]
    total = {key: sum(module[key] for module in modules.values()) for key in ("tests", "cpu", "wall", "processes")}
    lines = [
        f"{total['tests']} tests: {total['cpu']:.0f} CPU s, {total['wall']:.0f} s wall, {total['processes']} processes",
        "",
        "| module | tests | CPU s | wall s | processes |",
        "|---|---|---|---|---|",
    ]
    for name, module in sorted(modules.items(), key=lambda item: -item[1]["cpu"]):
        lines.append(
            f"| {name} | {module['tests']} | {module['cpu']:.0f} | {module['wall']:.0f} | {module['processes']} |"
        )
    workers = sorted({row["worker"] for row in rows if "worker" in row})
    if workers:  # pytest-xdist: what each worker ran (its wall seconds: how long it was busy)
        lines += ["", "| worker | tests | CPU s | wall s |", "|---|---|---|---|"]
        for worker in workers:
            mine = [row for row in rows if row.get("worker") == worker]
            wall = sum(row["wall_s"] for row in mine)
            lines.append(f"| {worker} | {len(mine)} | {sum(map(cpu, mine)):.0f} | {wall:.0f} |")
    lines += ["", "| test | CPU s | wall s | processes |", "|---|---|---|---|"]
    for row in sorted(rows, key=cpu, reverse=True)[:top]:
        lines.append(f"| {row['test']} | {cpu(row):.1f} | {row['wall_s']:.1f} | {row['processes']} |")
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    print(tables([json.loads(line) for path in sys.argv[1:] for line in open(path)]))
