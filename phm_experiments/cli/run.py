"""phm-run: run experiments from configs/ (prepare data, train, evaluate), resuming what is done.

    phm-run configs/small/multi30k/phm_n4.yaml configs/small/multi30k/transformer.yaml
    phm-run configs/table2            # every config below a folder, in name order
    phm-run configs/table2 --seeds 1 2 3

Each run lives in RUNS/<config path under configs/, without .yaml>/seed<S>/ (RUNS defaults to
work/runs; S is the config's seed, or each of --seeds): checkpoints/ (with fingerprint.json, the
config values that trained them), train.log, evaluate.log and result.json, which holds the
score, the parameter counts, training and evaluation speed, the seed, the exact commands and
the versions (schema: phm_experiments/results.py).

Every config of the command line is checked completely before the first run: its keys, types
and placeholders, and its options through fairseq-train's and fairseq-generate's own parsers.
A run whose result.json has every value of its config is skipped; an interrupted run resumes
from its checkpoints, a finished one whose evaluation changed is only evaluated again.
Checkpoints trained with other config values are refused with what changed; --force
starts such a run clean. Every command runs with its CPU kernels and threads pinned (threads: this
process's, OMP_NUM_THREADS), so that a seed gives the same bits on every CPU that reproduces the
committed reference (phm_experiments/kernels.py; --native-kernels for each CPU's fastest instead).

A config is YAML: `phm-run --schema` lists every key with its type and meaning (the schema is
phm_experiments/config.py's; docs/experiments.md explains it with examples). For instance:

    extends: _data.yaml               # another config (relative to this one), overridden key by key
    data: data-bin/iwslt14.de-en      # relative to the working directory
    prepare: bash data-prep/iwslt14.sh -s de -t en   # run when `data` has no dictionary
    train: {task: translation, arch: phm_transformer_iwslt, phm-n: 4, ...}  # fairseq-train options
    evaluate:
      kind: bleu                      # fairseq-generate, then sacrebleu on the detokenized output
      reference: "{data}/raw/test.en"
      generate: {gen-subset: test, beam: 5, lenpen: 0.6, ...}  # fairseq-generate options

Option values and commands may use {data}, {run} and {teacher}; true stands for a bare flag,
false or null leave it out. Files named _*.yaml are bases for `extends` and are not run.
"""

import argparse
import signal
import sys
from pathlib import Path


def seed_value(text: str) -> int:
    from phm_experiments.config import MAX_SEED, is_seed

    try:
        value = int(text)
    except ValueError:
        value = None
    if not is_seed(value):
        raise argparse.ArgumentTypeError(f"a seed is an integer from 0 to {MAX_SEED}, not {text!r}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="phm-run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="*", help="config files or folders of them")
    parser.add_argument("--schema", action="store_true", help="print every key a config may have, and exit")
    parser.add_argument(
        "--runs-dir", type=Path, default=Path("work/runs"), help="where runs live (default: %(default)s)"
    )
    parser.add_argument(
        "--seeds",
        type=seed_value,
        nargs="+",
        metavar="S",
        help="run every config once per seed (default: the config's own seed)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="start the runs of these configs clean: remove their checkpoints, logs and results "
        "(only files phm-run made), then train and evaluate again",
    )
    parser.add_argument(
        "--eval-losses",
        action="store_true",
        help="after a run's evaluation, also measure its checkpoint_best.pt's losses with dropout off on the "
        "training and validation sets (eval_losses.json beside result.json; python -m phm_experiments.eval_losses "
        "measures finished runs)",
    )
    parser.add_argument(
        "--native-kernels",
        action="store_true",
        help="let each CPU choose its fastest kernels (AVX-512, its own MKL branch): faster where there "
        "is AVX-512, but the same seed no longer gives the same bits on another CPU. By default every "
        "command runs with the kernels pinned (python -m phm_experiments.kernels prints the pins)",
    )
    args = parser.parse_args(argv)
    if args.schema:
        from phm_experiments.config import schema_table

        print(schema_table(), end="")
        return 0
    if not args.configs:
        parser.error("give config files or folders of them (or --schema)")

    from phm_experiments import commands
    from phm_experiments.checks import check_all
    from phm_experiments.commands import CommandFailed
    from phm_experiments.config import ConfigError
    from phm_experiments.distill import DistillationFailed
    from phm_experiments.evaluation import EvaluationFailed
    from phm_experiments.run_folder import RunError
    from phm_experiments.runner import Runner

    # SIGTERM (a session's end, `kill`) stops phm-run as Ctrl-C does: the command it runs is
    # stopped too, and the next phm-run resumes
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    commands.PIN_KERNELS = not args.native_kernels
    try:
        if args.runs_dir.exists() and not args.runs_dir.is_dir():
            raise ConfigError(f"--runs-dir {args.runs_dir} is a file, not a folder of runs")
        jobs = check_all(args.configs, args.runs_dir, args.seeds)
        runner = Runner(args.runs_dir, force=args.force, eval_losses=args.eval_losses)
        for i, (config, seed) in enumerate(jobs, 1):
            print(f"\n=== [{i}/{len(jobs)}] {config.path}" + (f", seed {seed}" if seed is not None else ""), flush=True)
            runner.run(config, seed=seed)
    except ConfigError as error:
        parser.exit(2, f"phm-run: error: {error}\n")
    except CommandFailed as error:
        tail = "".join(f"  {line}\n" for line in error.stderr_tail[-5:])
        parser.exit(1, f"phm-run: error: {error}\n" + (f"its last lines on stderr:\n{tail}" if tail else ""))
    except (RunError, EvaluationFailed, DistillationFailed) as error:
        parser.exit(1, f"phm-run: error: {error}\n")
    except (KeyboardInterrupt, SystemExit) as stop:
        code = stop.code if isinstance(stop, SystemExit) else 130
        parser.exit(
            code,
            "phm-run: stopped; the command it was running is stopped too. Run the same phm-run "
            "again to go on: finished runs are kept, an interrupted training resumes from its last checkpoint\n",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
