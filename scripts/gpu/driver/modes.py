"""What a run is made of: its parts in order, the sizes and time caps of the GPU run and of the CPU dry
run that keeps this script working, and the command line's budget, caps and quality runs laid over them."""

import dataclasses

PARTS = ("install", "data", "cuda_tests", "training", "benchmarks", "quality")
NEEDS = {"data": ("install",), "cuda_tests": ("install",), **{p: ("install", "data") for p in PARTS[3:]}}


def with_needs(parts) -> tuple:
    """The parts asked and the parts they need, in PARTS' order: `--parts training` on a fresh machine has
    nothing installed and no data (install and data reuse what a warm machine has)."""
    wanted = set(parts) | {need for part in parts for need in NEEDS.get(part, ())}
    return tuple(part for part in PARTS if part in wanted)


@dataclasses.dataclass(frozen=True)
class Mode:
    """Sizes and time caps of a run: on the GPU, or the CPU dry run."""

    name: str
    budget_s: float  # wall time of the whole run, from run.sh's start
    caps: dict  # part -> its cap in seconds (quality: what is left, less quality_reserve_s)
    training_updates: dict  # size -> updates of each training at it, in this order
    tiny: bool  # the dry run's tiny models and data
    bench_linear: list
    bench_translation: list  # argv of each run, without --size
    bench_sizes: tuple
    quality_configs: tuple  # configs/gpu/<folder>/<name>.yaml, run side by side
    quality_reserve_s: float  # after the time cap: phm-run's start, the last validation, averaging, two evaluations
    quality_threads: int

    @property
    def gpu(self) -> bool:
        return self.name == "gpu"


GPU = Mode(
    name="gpu",
    budget_s=470,
    caps={"install": 90, "data": 90, "cuda_tests": 90, "training": 170, "benchmarks": 80},
    training_updates={"demo": 200, "base": 150},
    tiny=False,
    bench_linear=["--device", "cuda", "--dtype", "float16", "bfloat16", "--tokens", "4096", "16384", "65536"]
    + ["--rounds", "3", "--min-run-time", "0.02"],
    bench_translation=["--device", "cuda", "--rounds", "3", "--sentences", "64", "--min-run-time", "0.05"]
    + ["--models", "dense twin", "PHM n=2", "PHM n=4", "PHM n=8", "quaternion"],
    bench_sizes=("iwslt", "base"),
    quality_configs=tuple(
        f"{size}/{name}"
        for size in ("multi30k_iwslt", "multi30k_base")
        for name in ("transformer", "phm_n4", "phm_n2", "transformer_equal_params")
    ),
    quality_reserve_s=150,  # eight evaluations side by side overran 90 s on the H200
    quality_threads=2,
)
# the dry run's caps only stop a part that hangs: on a loaded machine its parts take several times longer
DRY_RUN = Mode(
    name="cpu-dry-run",
    budget_s=3000,
    caps={"install": 600, "data": 600, "cuda_tests": 600, "training": 600, "benchmarks": 600},
    training_updates={"demo": 8},
    tiny=True,
    bench_linear=["--device", "cpu", "--dtype", "float32", "bfloat16", "--tokens", "64", "--ns", "2", "4"]
    + ["--rounds", "1", "--min-run-time", "0.01", "--no-memory"],
    bench_translation=["--device", "cpu", "--rounds", "1", "--sentences", "4", "--length", "4", "--max-tokens", "512"]
    + ["--train-batches", "1", "--min-run-time", "0.01", "--no-memory", "--models", "dense twin", "PHM n=4"],
    bench_sizes=("demo",),
    quality_configs=("multi30k_iwslt/phm_n4",),
    quality_reserve_s=60,
    quality_threads=1,
)


def settings(args) -> Mode:
    """The mode's sizes and caps, with the command line's budget, caps and quality runs."""
    mode = GPU if args.mode == "gpu" else DRY_RUN
    return dataclasses.replace(
        mode,
        budget_s=mode.budget_s if args.budget is None else args.budget,
        caps={**mode.caps, **dict(args.cap)},
        quality_configs=tuple(args.quality or mode.quality_configs),
    )
