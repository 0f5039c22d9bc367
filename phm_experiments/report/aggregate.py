"""The report's figures: the runs below a folder (their result.json) as entries, one per
evaluation, and their seeds averaged into one Row per config (or epoch, or average of
checkpoints) and corpus; the tables and the plots are made from these."""

import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..fingerprint import differences
from ..results import Evaluation, Result
from .trace import TRACED, UNKNOWN, UNTRACED, Trace, trace_record


class ReportError(RuntimeError):
    pass


@dataclass
class Entry:
    """One evaluation of one run, placed in the table: checkpoint_best.pt's, an epoch's, or the
    average of the last epochs' (evaluate.average_last)."""

    result: Result
    evaluation: Evaluation
    row: str
    column: str
    dir: Path
    trace: Trace  # whether the run's code can be traced (trace.py)

    @property
    def is_best(self) -> bool:
        """checkpoint_best.pt's evaluation: the run's own row"""
        return self.evaluation is self.result.evaluation


@dataclass
class Row:
    """One row of the report: a config (``row``: the config's name, <config>@<N>ep for its
    checkpoint at the end of epoch N, <config>@avg<N> for the average of its last N epoch
    checkpoints) on one corpus (``column``), its seeds' runs averaged. The fields are OUT.csv's
    columns, in its order."""

    arch: Optional[str]
    metric: str
    score: float  # the mean over seeds, and its standard deviation (None for one seed)
    score_std: Optional[float]
    chrf: Optional[float]  # where every seed has one
    chrf_std: Optional[float]
    # where training stopped (runs trained to convergence): each seed's, as "a / b / c"
    best_valid: Optional[str]  # the best validation score (of --best-checkpoint-metric): what selects
    best_epochs: Optional[str]
    last_epochs: Optional[str]
    stopped_early: Optional[str]
    train_hours: Optional[str]
    seeds: str  # "1 2 3"
    threads: str  # each seed's torch threads, as "a / b / c": speeds compare only at one count
    # each seed's load average while it trained and while it evaluated: speeds compare only where both
    # sides had the machine to themselves (see had_machine_to_itself)
    train_load: Optional[str]
    eval_load: Optional[str]
    cpu_kernels: Optional[str]  # each seed's torch CPU kernels (AVX2, AVX512): and only on one kind
    paper_score: Optional[float]  # the paper's figure (of a finished training: not on an epoch's row)
    params: int
    params_no_emb: int
    dense_params_no_emb: int  # with every PHM or quaternion layer counted as the nn.Linear it stands for
    module_params: Optional[str]  # the config's count_module: "<name>: <total>"
    paper_params: Optional[float]
    train_words_per_s: int
    s_per_100_updates: float
    paper_s_per_100_updates: Optional[float]
    eval_examples_per_s: float
    inference_seconds: Optional[float]
    paper_inference_seconds: Optional[float]
    updates: int  # an epoch's row: the updates of its checkpoint
    train_commands: list[str]  # one per seed
    evaluate_commands: list[str]
    column: str
    row: str
    # against the dense model of the same corpus (see run_rows)
    params_change: Optional[float] = None  # parameters without embeddings, %
    train_speed_vs_dense: Optional[float] = None
    eval_speed_vs_dense: Optional[float] = None
    traced: str = ""  # each seed's record: "yes", "no" (its code cannot be traced: trace.py) or "unknown"

    @property
    def untraced(self) -> bool:
        """Whether a seed's record cannot be traced to its code: the tables mark the row."""
        return "no" in self.traced.split(" / ")


def load_results(root: Path) -> list[Entry]:
    """Every run's result.json below ``root``: its evaluations as entries of the table."""
    if not root.is_dir():
        raise ReportError(f"{root}: no such folder of runs")
    entries = []
    for file in sorted(root.rglob("result.json")):
        result = Result.read(file)
        traced = trace_record(result, file.parent)
        config_dir = file.parent.parent.relative_to(root)  # .../<config>/seed<S>/result.json
        column = str(config_dir.parent) if str(config_dir.parent) != "." else root.name
        for evaluation in result.evaluations:
            row = config_dir.name
            if evaluation.epoch is not None:
                row += f"@{evaluation.epoch}ep"
            elif evaluation.averaged:
                row += f"@avg{len(evaluation.averaged)}"
            entries.append(Entry(result, evaluation, row, column, file.parent, traced))
    if not entries:
        raise ReportError(f"no result.json under {root} (run `phm-run` first)")
    check_one_metric_and_task(root, entries)
    return entries


def check_one_metric_and_task(root: Path, entries: list[Entry]) -> None:
    """A report holds one metric (its tables and plots have one score axis), and each of its corpora one
    task (their models' parameters and speeds are set against the corpus's dense model): a folder that mixes
    them is refused, with the runs of each."""

    def runs_by(kind_of, entries) -> dict:
        groups = {}
        for entry in entries:
            if entry.is_best and kind_of(entry) is not None:
                groups.setdefault(kind_of(entry), []).append(str(entry.dir.relative_to(root)))
        return groups

    def listed(groups: dict) -> str:
        return "".join(f"\n  {kind}: {', '.join(runs)}" for kind, runs in groups.items())

    metrics = runs_by(lambda entry: entry.evaluation.metric, entries)
    if len(metrics) > 1:
        raise ReportError(
            f"{root} holds runs scored by {' and '.join(metrics)}, which one report cannot set side by side:"
            f"{listed(metrics)}\nCollect each metric's runs on their own, from a folder that holds only them"
        )
    for column in sorted({entry.column for entry in entries}):
        tasks = runs_by(lambda entry: task_of(entry.result), [entry for entry in entries if entry.column == column])
        if len(tasks) > 1:
            raise ReportError(
                f"{column} holds runs of the tasks {' and '.join(tasks)}, whose parameters and speeds cannot be "
                f"set against one dense model:{listed(tasks)}\nPut each task's runs in a folder of their own"
            )


def task_of(result: Result) -> Optional[str]:
    """The fairseq task the run trained (None where the record does not say)."""
    return ((result.config_values or {}).get("train") or {}).get("task")


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def is_dense(entry: Entry) -> bool:
    return entry.result.parameters.dense_total == entry.result.parameters.total


def row_order(name: str):
    """Dense first, then quaternion, then PHM by n: the paper's order; epochs of a run after it, in order."""
    name, _, variant = name.partition("@")
    number = re.search(r"(\d+)$", name)
    return (
        "quaternion" in name,
        "phm" in name,
        int(number.group(1)) if number else 0,
        name,
        variant != "",  # a run's own row first (before its epoch 0: the names tie on every other key)
        variant.startswith("avg"),  # a run's average after its epochs
        int(re.sub(r"\D", "", variant) or 0),
    )


def ratio(value, reference):
    return round(value / reference, 3) if value and reference else None


def machine_of(runs: list[Entry]) -> Optional[tuple]:
    """The (device, torch's CPU kernels, torch threads) that every run ran on; None where they differ."""
    machines = {
        (e.result.environment.device, e.result.environment.cpu_capability, e.result.environment.threads) for e in runs
    }
    return machines.pop() if len(machines) == 1 else None


def dense_models(groups: dict[tuple[str, str], list[Entry]]) -> dict[str, str]:
    """The row of each corpus that the others are set against: the dense twin of its compressed
    models (its parameters are theirs with every PHM or quaternion layer dense), not a smaller dense
    model beside it; else the first dense model in the paper's order (e.g. before a distilled dense
    student). A run's own rows only (checkpoint_best.pt's), not its epochs' or averages'."""
    twins = {(e.column, e.result.parameters.dense_total) for runs in groups.values() for e in runs if not is_dense(e)}
    candidates = sorted(
        (key for key, runs in groups.items() if is_dense(runs[0]) and "@" not in key[1]),
        key=lambda key: ((key[0], groups[key][0].result.parameters.total) not in twins, row_order(key[1])),
    )
    chosen = {}
    for column, name in candidates:
        chosen.setdefault(column, name)
    return chosen


def had_machine_to_itself(runs: list[Entry], step: str) -> bool:
    """Whether every run's ``step`` ("training" or "evaluation") had the machine to itself: the load
    average recorded while it ran below its torch threads + 1 (a run of T threads alone keeps it near T,
    and a second run beside it adds its own). A run recorded without one (resumed, or older) did not."""

    def load(entry: Entry):
        return entry.result.training.load_average if step == "training" else entry.evaluation.load_average

    return all(load(e) is not None and load(e) < e.result.environment.threads + 1 for e in runs)


def run_rows(entries: list[Entry]) -> list[Row]:
    """One row per config and corpus: its seeds' runs averaged, set against the corpus's dense model
    (speeds only like for like: where both ran on one CPU, with the same kernels, at one thread count,
    each with the machine to itself); by corpus, in the paper's order."""
    groups = {}
    for entry in entries:
        groups.setdefault((entry.column, entry.row), []).append(entry)
    dense = {
        column: (mean_of(column, name, groups[column, name]), groups[column, name])
        for column, name in dense_models(groups).items()
    }
    rows = []
    for (column, name), runs in groups.items():
        check_one_config(runs)
        row = mean_of(column, name, runs)
        reference, reference_runs = dense.get(column, (None, None))
        dense_no_emb = reference.params_no_emb if reference else row.dense_params_no_emb
        row.params_change = round(100 * (row.params_no_emb / dense_no_emb - 1), 1)
        machine = machine_of(runs)
        if reference and machine is not None and machine == machine_of(reference_runs):
            if had_machine_to_itself(runs, "training") and had_machine_to_itself(reference_runs, "training"):
                row.train_speed_vs_dense = ratio(row.train_words_per_s, reference.train_words_per_s)
            if had_machine_to_itself(runs, "evaluation") and had_machine_to_itself(reference_runs, "evaluation"):
                row.eval_speed_vs_dense = ratio(row.eval_examples_per_s, reference.eval_examples_per_s)
        rows.append(row)
    return sorted(rows, key=lambda row: (row.column, row_order(row.row)))


def check_one_config(runs: list[Entry]) -> None:
    """The seeds of one row ran one config: a config edited after some of its seeds ran (and rerun
    for others only) would otherwise be averaged with them as if it were the same experiment."""
    first = runs[0].result
    for entry in runs[1:]:
        if first.config_values is None or entry.result.config_values is None:
            continue  # written before results held the config: nothing to compare
        changes = differences(
            {k: v for k, v in first.config_values.items() if k != "seed"},
            {k: v for k, v in entry.result.config_values.items() if k != "seed"},
        )
        if changes:
            raise ReportError(
                f"{runs[0].column}/{runs[0].row}: seed {first.seed} and seed {entry.result.seed} ran different "
                "configs, which one row cannot average:\n"
                + "\n".join(f"  {line}" for line in changes)
                + f"\nRun phm-run on {first.config} for every seed again (the ones done with the current "
                "config are kept), or collect the runs in separate folders"
            )


def mean_of(column: str, name: str, runs: list[Entry]) -> Row:
    """The row ``name`` of ``column``: the figures of its runs, averaged over their seeds (nothing
    set against the dense model yet)."""
    first = runs[0].result
    paper = first.paper or {}
    evaluation = [entry.evaluation for entry in runs]
    training = [entry.result.training for entry in runs]
    scores = [e.score for e in evaluation]
    module = first.parameters.module
    inference = mean(
        e.seconds or (e.examples / e.examples_per_second if e.examples_per_second else None) for e in evaluation
    )
    epoch = evaluation[0].epoch
    chrf = [e.chrf for e in evaluation if e.chrf is not None]
    return Row(
        arch=first.arch,
        metric=evaluation[0].metric,
        score=round(mean(scores), 2),
        score_std=round(statistics.stdev(scores), 2) if len(scores) > 1 else None,
        chrf=round(mean(chrf), 2) if len(chrf) == len(evaluation) else None,
        chrf_std=round(statistics.stdev(chrf), 2) if len(chrf) == len(evaluation) > 1 else None,
        best_valid=seeds_of(t.best_valid for t in training),
        best_epochs=seeds_of(t.best_epoch for t in training),
        last_epochs=seeds_of(t.last_epoch for t in training),
        stopped_early=seeds_of(t.stopped_early for t in training),
        train_hours=seeds_of(round(t.total_wall_seconds / 3600, 2) if t.total_wall_seconds else None for t in training),
        seeds=" ".join(str(entry.result.seed) for entry in runs),
        threads=seeds_of(entry.result.environment.threads for entry in runs),
        train_load=seeds_of(t.load_average for t in training),
        eval_load=seeds_of(e.load_average for e in evaluation),
        cpu_kernels=seeds_of(entry.result.environment.cpu_capability for entry in runs),
        paper_score=paper.get(evaluation[0].metric) if epoch is None else None,
        params=first.parameters.total,
        params_no_emb=first.parameters.without_embeddings,
        dense_params_no_emb=first.parameters.dense_without_embeddings,
        module_params=f"{module.name}: {module.total:,}" if module else None,
        paper_params=paper.get("parameters"),
        train_words_per_s=round(mean(t.words_per_second for t in training) or 0),
        s_per_100_updates=round(mean(t.seconds_per_100_updates for t in training) or 0, 2),
        paper_s_per_100_updates=paper.get("seconds_per_100_updates"),
        eval_examples_per_s=round(mean(e.examples_per_second for e in evaluation) or 0, 1),
        inference_seconds=round(inference, 1) if inference else None,
        paper_inference_seconds=paper.get("inference_seconds"),
        updates=int(
            mean(e.updates if e.epoch is not None and e.updates else t.updates for e, t in zip(evaluation, training))
        ),
        train_commands=[t.command for t in training],
        evaluate_commands=[e.command for e in evaluation],
        column=column,
        row=name,
        traced=seeds_of(TRACED_CELL[entry.trace.state] for entry in runs),
    )


TRACED_CELL = {TRACED: "yes", UNTRACED: "no", UNKNOWN: "unknown"}


def seeds_of(values) -> Optional[str]:
    """One figure per seed, "a / b / c"; None where no run has it."""
    values = list(values)
    if all(v is None for v in values):
        return None
    return " / ".join("?" if v is None else ("yes" if v is True else "no" if v is False else str(v)) for v in values)


def started_from(result: Result) -> Optional[Path]:
    """The teacher's run folder where the run starts from the teacher's checkpoint (``init``), else None."""
    if result.init is None or result.teacher is None:
        return None
    return Path(result.teacher.run).resolve()


def scores_against_updates(entries: list[Entry]) -> dict:
    """{(column, config): {epoch: [(total updates, score) of each seed]}} of the runs evaluated
    after given epochs, a teacher's updates counted where a run starts from its checkpoint (seeds
    of a distilled run can differ in updates an epoch: the teachers' translations differ in
    length); a teacher of such a run adds its final score (epoch None)."""
    runs = {entry.dir.resolve(): entry.result for entry in entries}
    series, teachers = {}, set()
    for entry in entries:
        if entry.evaluation.epoch is None:  # not an epoch's checkpoint
            continue
        teacher = started_from(entry.result)
        offset = 0
        if teacher is not None:
            if teacher not in runs:
                if not (teacher / "result.json").exists():
                    raise ReportError(
                        f"{entry.result.config}: its teacher's run {entry.result.teacher.run} has no result.json"
                    )
                runs[teacher] = Result.read(teacher / "result.json")
            teachers.add(teacher)
            offset = runs[teacher].training.updates
        point = (offset + entry.evaluation.updates, entry.evaluation.score)
        config = entry.row.partition("@")[0]
        series.setdefault((entry.column, config), {}).setdefault(entry.evaluation.epoch, []).append(point)
    for entry in entries:
        if entry.is_best and entry.dir.resolve() in teachers:
            point = (entry.result.training.updates, entry.evaluation.score)
            series.setdefault((entry.column, entry.row), {}).setdefault(None, []).append(point)
    return series
