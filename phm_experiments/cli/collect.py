"""phm-collect: finished runs (phm-run's result.json files) as the paper's tables, with plots.

    phm-collect work/runs/table2 --out work/reports/table2

reads every result.json below the folder; a run's place in it names the row and the column:
work/runs/table2/iwslt14_de_en/phm_n4/seed1 is row phm_n4, column iwslt14_de_en (a folder with
the configs' runs directly in it has one column). Runs of several seeds make one row: the mean
score, its standard deviation and the seeds. A config with evaluate.epochs adds one row per
epoch, named <row>@<N>ep (its checkpoint at the end of epoch N). Writes
    OUT.md    the paper's layout: the score of every model (rows) on every corpus (columns), the
              paper's figure beside it where the config gives one; parameters without embeddings
              and their change against the dense model of the same corpus; then every run with
              its parameters, speeds, seed and exact commands
    OUT.csv   one line per row, every figure
    OUT.png   score against parameters without embeddings
    OUT.curves.png   learning curves (training and validation loss against updates)
A row made from a record whose code cannot be traced (its commit is not in main's history, or it ran
from uncommitted changes it did not store) is marked † in every table, and OUT.csv's column traced
says so per seed; --traced-only leaves such runs out.
"""

import argparse
import sys
from pathlib import Path


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="phm-collect", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", type=Path, help="a folder of runs (searched for result.json)")
    parser.add_argument("--out", required=True, help="output path without suffix")
    parser.add_argument("--title", help="the table's title (default: the folder's name)")
    parser.add_argument(
        "--traced-only",
        action="store_true",
        help="leave out the runs whose code cannot be traced to main's history (each named on stderr)",
    )
    args = parser.parse_args(argv)

    from phm_experiments.report import ReportError, collect
    from phm_experiments.results import ResultError

    if not Path(args.out).name or args.out.endswith(("/", ".")):
        parser.error(
            f"--out {args.out!r}: give a path without suffix, e.g. work/reports/table2 (writes table2.md, ...)"
        )
    args.out = Path(args.out)
    for parent in (args.out.parent, *args.out.parent.parents):
        if parent.exists() and not parent.is_dir():
            parser.error(f"--out {args.out}: {parent} is a file, not a folder")
    try:
        collect(args.runs, args.out, args.title, traced_only=args.traced_only)
    except (ReportError, ResultError) as error:
        parser.exit(1, f"phm-collect: error: {error}\n")
    print(Path(f"{args.out}.md").read_text(encoding="utf-8"))
    epochs = ", .epochs.png" if Path(f"{args.out}.epochs.png").exists() else ""
    print(f"wrote {args.out}.md, .csv, .png, .curves.png{epochs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
