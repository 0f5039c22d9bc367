"""phm-collect's report: finished runs (phm-run's result.json files) as the paper's tables, with plots.

    phm-collect work/runs/table2 --out work/reports/table2

reads every result.json below the folder; a run's place in it names the row and the column:
work/runs/table2/iwslt14_de_en/phm_n4/seed1 is row phm_n4, column iwslt14_de_en (a folder with
the configs' runs directly in it has one column). Runs of several seeds make one row: the mean
score, its standard deviation and the seeds. A config with evaluate.epochs adds one row per
epoch, named <row>@<N>ep (e.g. phm_n4_ft@2ep: its checkpoint at the end of epoch 2), and one with
evaluate.average_last a row <row>@avg<N> (the average of its last N epoch checkpoints). Writes
    OUT.md    the paper's layout: the score of every model (rows) on every corpus (columns), the
              paper's figure beside it where the config gives one; parameters without embeddings
              and their change against the dense model of the same corpus; then every run with
              its parameters, speeds, seed and exact commands; for runs trained to convergence,
              where each seed's training stopped (best and last epoch, updates, wall time)
    OUT.csv   one line per row, every figure
    OUT.png   score against parameters without embeddings and in all, each model's seed spread
    OUT.curves.png   learning curves (training and validation loss against updates) as the
              runs' fairseq logs reported them
    OUT.epochs.png   (runs with evaluate.epochs) the score after each of those epochs against the
              total training updates, a teacher's included where a run starts from its checkpoint
              (phm-compress + fine-tuning against training from scratch at equal updates)
    OUT.parameters.png   (runs with --log-parameter-stats) each kind's relative update and gradient
              norm against updates, and the validation BLEU; OUT.md then ends with the training
              diagnostics (diagnostics.py)

Every table marks (†) a row made from a record whose code cannot be traced (trace.py: its commit is
not in main's history, or it ran from uncommitted changes it did not store), and OUT.csv says so per
seed (column traced); --traced-only leaves such runs out.

aggregate.py reads the runs and averages their seeds into rows (Row: one config on one corpus),
tables.py makes OUT.md and OUT.csv of the rows, plots.py the plots.
"""

import sys
from pathlib import Path

from . import diagnostics
from .aggregate import Entry, ReportError, Row, load_results, row_order, run_rows, scores_against_updates
from .plots import plot_curves, plot_epochs, plot_scores
from .tables import markdown, write_csv
from .trace import TRACED

__all__ = [
    "Entry",
    "ReportError",
    "Row",
    "collect",
    "load_results",
    "markdown",
    "row_order",
    "run_rows",
    "scores_against_updates",
]


def collect(root: Path, out: Path, title=None, traced_only=False) -> list[Row]:
    """Writes OUT.md, OUT.csv, OUT.png, OUT.curves.png (and OUT.epochs.png) from the runs below ``root``
    (``traced_only``: those whose code can be traced alone, each run left out named on stderr); returns the rows."""
    entries = load_results(root)
    left_out = []
    if traced_only:
        for entry in entries:
            run = str(entry.dir.relative_to(root))
            if entry.trace.state != TRACED and run not in left_out:
                left_out.append(run)
                print(f"phm-collect: left out {run} (--traced-only): {entry.trace.why}", file=sys.stderr)
        entries = [entry for entry in entries if entry.trace.state == TRACED]
        if not entries:
            raise ReportError(f"no run below {root} can be traced to its code (--traced-only)")
    rows = run_rows(entries)
    out.parent.mkdir(parents=True, exist_ok=True)
    section = diagnostics.markdown(diagnostics.diagnostics(entries))
    text = markdown(title or root.name, rows, entries, left_out)
    Path(f"{out}.md").write_text(text + (f"\n{section}" if section else ""))
    write_csv(rows, Path(f"{out}.csv"))
    plot_scores(rows, Path(f"{out}.png"))
    plot_curves(entries, Path(f"{out}.curves.png"))
    diagnostics.plot_parameter_statistics(entries, Path(f"{out}.parameters.png"))
    series = scores_against_updates(entries)
    if series:
        plot_epochs(series, rows[0].metric, Path(f"{out}.epochs.png"))
    else:  # an earlier collect's plot into the same OUT would describe other runs
        Path(f"{out}.epochs.png").unlink(missing_ok=True)
    return rows
