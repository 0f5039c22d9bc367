"""fairseq's logs as records: what phm-run reads from fairseq-train and fairseq-generate.

fairseq logs ``2026-11-21 08:42:54 | INFO | train | {"epoch": 4, "train_loss": "7.795", ...}``:
a time, a level, a logger name and a message, one record per line (a message may continue on
the lines after it, e.g. the model's structure). phm-run passes ``--log-format json`` to
fairseq-train, so its progress records are JSON objects, named by their tag:

- ``train_inner``: every --log-interval updates, the stats of those updates (``loss``, ``num_updates``, ...);
- ``train``: the end-of-epoch summary, its keys prefixed (``train_loss``, ``train_num_updates``, ...);
- ``valid`` (or the name of another --valid-subset): a validation, keys prefixed the same way.

fairseq prints every figure as a string ("7.795"): ``Stats`` holds them as numbers, without the prefix.
Lines are split on "\\n" only: a U+2028 inside a message is part of it.
"""

import datetime
import json
import re
from dataclasses import dataclass, field

PROGRESS_TAGS = ("train_inner", "train")  # the other JSON records are validations


@dataclass(frozen=True)
class LogRecord:
    time: str
    level: str
    name: str  # the logger: fairseq_cli.train, fairseq.trainer, train_inner, train, valid, ...
    message: str

    def stats(self):
        """The figures of a progress record (a JSON object), as numbers where they are numbers; else None.
        fairseq writes one on one line: lines after it (e.g. a warning on stderr) are not part of it."""
        if not self.message.startswith("{"):
            return None
        try:
            values = json.loads(self.message.split("\n", 1)[0])
        except ValueError:
            return None
        if not isinstance(values, dict):
            return None
        prefix = f"{self.name}_"
        return {
            (key[len(prefix) :] if key.startswith(prefix) else key): _number(value) for key, value in values.items()
        }


def _number(value):
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _record(line: str):
    parts = line.split(" | ", 3)
    if len(parts) != 4:
        return None
    try:
        datetime.datetime.strptime(parts[0], "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    return LogRecord(*parts)


def _time(record: LogRecord) -> datetime.datetime:
    return datetime.datetime.strptime(record.time, "%Y-%m-%d %H:%M:%S")


def read_records(text: str) -> list:
    """The log records of fairseq's output; lines that continue a message are joined to it."""
    records = []
    for line in text.split("\n"):
        record = _record(line.rstrip("\r"))
        if record is not None:
            records.append(record)
        elif records and line:
            last = records[-1]
            records[-1] = LogRecord(last.time, last.level, last.name, f"{last.message}\n{line}")
    return records


@dataclass
class TrainingLog:
    """What phm-run needs from fairseq-train's log (``--log-format json``): of one process, or of
    several appended to one file (a run interrupted and resumed)."""

    inner: list = field(default_factory=list)  # train_inner stats
    epochs: list = field(default_factory=list)  # end-of-epoch train stats, with "updates_in_epoch"
    valid: list = field(default_factory=list)  # validations (every --valid-subset), with "subset"
    resumed_from_updates: int = 0  # the updates of the checkpoint the last process started from
    done: bool = False  # fairseq-train's "done training" record: training ended normally
    stopped_early: bool = False  # fairseq's --patience ended the training ("early stop since ...")
    wall_seconds: float = 0.0  # from each process's first log record to its last, summed over processes

    @classmethod
    def parse(cls, text: str) -> "TrainingLog":
        log = cls()
        updates = 0  # where the epoch being logged started: the previous summary, or a loaded checkpoint
        records = []
        # phm-run writes "$ COMMAND" before each process's output (commands.run): one span of wall time each
        for process in re.split(r"^\$ .*$", text, flags=re.MULTILINE):
            span = read_records(process)
            if span:
                log.wall_seconds += (_time(span[-1]) - _time(span[0])).total_seconds()
            records += span
        for record in records:
            stats = record.stats()
            if stats is not None:
                if record.name == "train_inner":
                    log.inner.append(stats)
                elif record.name == "train":
                    log.epochs.append({**stats, "updates_in_epoch": int(stats["num_updates"]) - updates})
                    updates = int(stats["num_updates"])
                else:
                    log.valid.append({"subset": record.name, **stats})
            elif record.name == "fairseq.trainer" and record.message.startswith("Loaded checkpoint "):
                # "Loaded checkpoint DIR/checkpoint_last.pt (epoch 3 @ 303 updates)"
                updates = log.resumed_from_updates = int(record.message.rsplit(" @ ", 1)[1].split()[0])
                log.done = False
            elif record.name == "fairseq_cli.train" and record.message.startswith("done training"):
                log.done = True
            elif record.name == "fairseq_cli.train" and record.message.startswith("early stop since"):
                log.stopped_early = True
        return log

    def validations(self, metric: str) -> dict:
        """{epoch: the validation's ``metric``} of the first --valid-subset, at the end of each epoch
        (a resumed process that validated an epoch again: its figure)."""
        subsets = [v["subset"] for v in self.valid]
        return {
            int(v["epoch"]): v[metric]
            for v in self.valid
            if v["subset"] == subsets[0] and isinstance(v.get(metric), float) and "epoch" in v
        }

    def best_epoch(self, metric: str, maximize: bool):
        """The epoch whose validation fairseq's early stopping counts from: the first to reach the best
        ``metric`` (a later tie does not reset --patience); None without validations."""
        scores = self.validations(metric)
        if not scores:
            return None
        best = (max if maximize else min)(scores.values())
        return min(epoch for epoch, score in scores.items() if score == best)

    @property
    def epochs_trained(self) -> int:
        """The epochs trained, over every process. fairseq validates, saves the checkpoint, then logs
        the epoch's summary: a process stopped between the two resumes after that epoch without its
        summary, so an epoch counts by its summary or its validation."""
        return len({int(s["epoch"]) for s in (*self.epochs, *self.valid) if "epoch" in s})

    @property
    def final_updates(self):
        """The update count fairseq reports last (its final epoch summary comes after the last save)."""
        counts = [int(s["num_updates"]) for s in (*self.epochs, *self.valid, *self.inner) if "num_updates" in s]
        return max(counts, default=None)

    def speed(self) -> dict:
        """Seconds in training steps (not validation or checkpointing) and words per second, from
        the epoch summaries. Each epoch counts the updates since the one before, or since the
        checkpoint its process resumed from."""
        seconds = words = updates = 0
        for epoch in self.epochs:
            count = epoch["updates_in_epoch"]
            # fairseq prints train_wall in whole seconds and ups to two decimals: take the more
            # precise of the two (short epochs have train_wall 0)
            wall, ups = epoch.get("train_wall", 0), epoch.get("ups", 0)
            seconds += wall if ups == 0 or 0.5 / max(wall, 1e-9) < 0.005 / ups else count / ups
            words += epoch.get("wpb", 0) * count
            updates += count
        return {
            "train_seconds": round(seconds, 2),
            "seconds_per_100_updates": 100 * seconds / updates if updates and seconds else None,
            "words_per_second": words / seconds if seconds else None,
        }

    def curve(self) -> dict:
        """Against updates: the training loss (every --log-interval updates) and the validation loss;
        the validation BLEU where the training validated it (--eval-bleu); and the epoch averages of
        the parameter statistics by kind (--log-parameter-stats: gnorm_<kind>, pnorm_<kind>,
        update_<kind>). Where a resumed process logged the same update count again, its figure."""

        def points(stats, key):
            return sorted(
                [n, value]
                for n, value in {
                    int(s["num_updates"]): s[key] for s in stats if "num_updates" in s and key in s
                }.items()
            )

        curve = {"train": points(self.inner, "loss"), "valid": points(self.valid, "loss")}
        if any("bleu" in v for v in self.valid):
            curve["valid_bleu"] = points(self.valid, "bleu")
        for key in sorted({key for epoch in self.epochs for key in epoch if PARAMETER_STATISTIC.match(key)}):
            curve[key] = points(self.epochs, key)
        return curve


PARAMETER_STATISTIC = re.compile(r"^(gnorm|pnorm|update)_[a-z]+$")
"""The keys of --log-parameter-stats (phm_layers.parameter_groups.ParameterStatistics)."""
