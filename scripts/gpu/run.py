"""The GPU run (scripts/gpu/run.sh calls it): one command that makes the most of a GPU lent for minutes.
`python scripts/gpu/run.py --help` lists its parts; the driver package beside this file holds them, one
job a module (driver/__init__.py names each)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the driver package, also where run.py is loaded by path

from driver import cli, plan  # noqa: E402
from driver.context import Context  # noqa: E402
from driver.modes import settings  # noqa: E402


def main(argv=None) -> int:
    args = cli.parse_args(argv)
    mode = settings(args)
    cli.make_folders(args)
    (args.out / "artifacts.tar").unlink(missing_ok=True)
    folders = args.out.resolve(), args.work.resolve(), args.wheels.resolve()
    ctx = Context.create(mode, args.python, *folders, args.started, args.parts, args.command)
    return plan.run_all(ctx)


if __name__ == "__main__":
    sys.exit(main())
