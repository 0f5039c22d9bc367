"""The installed commands are the mains that the tests call in this process: each console script of the
package loads, starts and names itself (the other tests run most commands as main([...]), not as processes)."""

from importlib.metadata import distribution

import pytest
from conftest import run_main

SCRIPTS = {ep.name: ep for ep in distribution("phm-fairseq").entry_points if ep.group == "console_scripts"}


def test_the_package_installs_its_commands():
    assert set(SCRIPTS) == {"phm-params", "phm-evaluate", "phm-compress", "phm-export", "phm-run", "phm-collect"}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_command_is_a_main_that_takes_its_arguments(name):
    result = run_main(SCRIPTS[name].load(), "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: {name} "), result.stdout[:200]
