"""What every console command of the plugin does around its own work: one ``main`` for all of them.

stdout carries the command's report alone: fairseq logs to the root logger, so while the command runs
the root logger writes to stderr, warnings and errors only. A refusal (bad input, an --out that cannot
be written) prints ``PROG: error: MESSAGE`` on stderr and exits with status 2, as argparse does for a
bad option, without a traceback; success returns 0. Called in-process (tests, a notebook), it leaves
the process's logging and warning filters as it found them.
"""

import contextlib
import logging
import sys
import warnings


class RefusedInput(ValueError):
    """A command's input or --out that it refuses, with the message to show."""


# fairseq asks its DataLoader to pin memory, which a CPU-only machine cannot do: a warning per batch iterator
PIN_MEMORY = ".pin_memory. argument is set as true but no accelerator"


def main(prog: str, parse, work, argv=None, refusals=()) -> int:
    """Runs a command: ``parse(argv)`` gives its arguments (argparse's errors exit with status 2), then
    ``work(args)`` does the work and prints the report. ``refusals``: exception classes besides
    RefusedInput whose message is a refusal to show."""
    args = parse(argv)
    with _root_logger_to_stderr(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PIN_MEMORY)
        try:
            work(args)
        except (RefusedInput, *refusals) as error:
            print(f"{prog}: error: {error}", file=sys.stderr)
            sys.exit(2)
    return 0


@contextlib.contextmanager
def _root_logger_to_stderr():
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    handler = logging.StreamHandler(sys.stderr)  # the stderr of now, which a caller may have redirected
    handler.setFormatter(logging.Formatter(logging.BASIC_FORMAT))
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
