"""Time: the run's budget, counted from run.sh's start; a part's deadline within it; a share of what is left."""

import dataclasses
import time

MIN_PART_SECONDS = 5  # a part with less time than this left in the run's budget is skipped


class TimedOut(Exception):
    """A process ran to its deadline and was stopped."""


class Skipped(Exception):
    """A part that cannot say anything in the time it has."""


@dataclasses.dataclass(frozen=True)
class Budget:
    started: float  # UNIX time
    seconds: float

    @property
    def deadline(self) -> float:
        return self.started + self.seconds

    def left(self) -> float:
        return self.deadline - time.time()

    def part_deadline(self, start: float, cap: float) -> float:
        """A part's deadline: ``cap`` seconds from ``start``, within the run's budget."""
        return min(start + cap, self.deadline)


def share(deadline: float, runs_left: int) -> float:
    """The deadline of the next of ``runs_left`` runs that split what is left before ``deadline``
    equally, so that one that overruns leaves the others their time."""
    return time.time() + (deadline - time.time()) / runs_left
