"""One run: a config at a seed, in its folder below RUNS, after the run of its teacher (same seed)
where the config names one. The steps (data.py, training.py, evaluation.py) take a Run."""

import dataclasses
import functools
from pathlib import Path
from typing import Optional

from .config import Config, fill, load_config
from .fingerprint import Fingerprint
from .run_folder import RunFolder


@dataclasses.dataclass(frozen=True)
class Run:
    """A config (at its seed), its run's folder, and the run of its teacher where it has one."""

    config: Config
    folder: RunFolder
    teacher: Optional["Run"] = None

    @classmethod
    def of(cls, config: Config, runs_dir: Path) -> "Run":
        teacher = cls.of(load_config(config.teacher).with_seed(config.seed), runs_dir) if config.teacher else None
        return cls(config, RunFolder.of(config.path, runs_dir, config.seed), teacher)

    @property
    def name(self) -> str:
        """The config file's name, which the console's lines of this run begin with."""
        return self.config.path.name

    @functools.cached_property
    def fingerprint(self) -> Fingerprint:
        return Fingerprint.of(self.config, self.teacher.fingerprint if self.teacher else None)

    @property
    def fields(self) -> dict:
        """The values of the config's placeholders: {data}, {run} and, with a teacher, {teacher} (its run folder)."""
        fields = {"data": self.config.data, "run": str(self.folder.path)}
        if self.teacher:
            fields["teacher"] = str(self.teacher.folder.path)
        return fields

    def fill(self, value) -> str:
        return fill(value, self.fields)

    def say(self, message: str) -> None:
        print(f"== {self.name}: {message}", flush=True)
