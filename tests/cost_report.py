"""``pytest --cost-report FILE``: what each test costs, as a JSON list, for docs/testing.md's table.

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
    parser.addoption("--cost-report", metavar="FILE", help="write each test's wall and CPU seconds to FILE (JSON)")


def pytest_configure(config):
    if not config.getoption("--cost-report"):
        return
    popen_init = subprocess.Popen.__init__

    def counting_init(self, *args, **kwargs):
        _started["processes"] += 1
        popen_init(self, *args, **kwargs)

    subprocess.Popen.__init__ = counting_init
    config._cost_rows = []


def _cpu(who) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    rows = getattr(item.config, "_cost_rows", None)
    if rows is None:
        yield
        return
    before = (time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _started["processes"])
    yield
    after = (time.perf_counter(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _started["processes"])
    wall, cpu_self, cpu_children, processes = (b - a for a, b in zip(before, after))
    rows.append(
        {
            "test": item.nodeid,
            "wall_s": round(wall, 2),
            "cpu_self_s": round(cpu_self, 2),
            "cpu_children_s": round(cpu_children, 2),
            "processes": processes,
        }
    )


def pytest_unconfigure(config):
    rows = getattr(config, "_cost_rows", None)
    if rows is not None:
        with open(config.getoption("--cost-report"), "w") as f:
            json.dump(rows, f, indent=0)
