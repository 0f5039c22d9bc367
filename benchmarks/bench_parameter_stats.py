"""What --log-parameter-stats and the per-factor lr scales cost a training step: the same model, the same
batches, with and without them, in alternating rounds (ratios, not absolute times).

    python -m benchmarks.bench_parameter_stats                 # demo and iwslt sizes, on the CPU
    python -m benchmarks.bench_parameter_stats --device cuda

Writes benchmarks/results/parameter_stats_<device>.{json,md}. A step: forward, backward and fairseq's
Adam on the bundled Multi30k en-de (4,096 tokens a batch). "statistics": a norm of every gradient and
parameter and one copy of the parameters per step (phm_layers.parameter_groups); "rule lr x10":
the optimizer's groups split and restored around every step.
"""

import argparse
from pathlib import Path

import torch
from fairseq.optim.adam import Adam

from phm_layers.parameter_groups import ParameterStatistics, param_groups

from .bench_translation import batches, build_from_flags, training_step
from .common import REPO, RESULTS, default_threads, environment, prepare_multi30k, timed_ratio, write_report

MODELS = {"dense twin": ["--arch", "transformer_twin_{size}"], "PHM n=4": ["--arch", "phm_transformer_{size}"]}
OPTIONS = {"statistics": [], "rule lr x10": ["--rule-lr-scale", "10"]}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data-bin" / "multi30k.en-de"))
    parser.add_argument("--sizes", nargs="+", default=["demo", "iwslt"], choices=["demo", "iwslt", "base"])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--out", default=str(RESULTS), help="folder of the report")
    args = parser.parse_args()
    prepare_multi30k(args.data)
    default_threads()
    rows = []
    for size in args.sizes:
        args.size = size
        for name, flags in MODELS.items():
            for option, option_flags in OPTIONS.items():
                if option_flags and name == "dense twin":
                    continue  # a dense model has no factors to scale
                model, criterion, task, cfg = build_from_flags(flags + option_flags, args, args.device)
                samples = batches(task, "train", 4, args.device, max_tokens=cfg.max_tokens)
                # fairseq's Adam, as fairseq-train steps, in the groups of the scales (phm_fairseq.models.training)
                optimizer = Adam(param_groups(model, lr=1e-4))
                step = training_step(model, criterion, optimizer, samples)
                if option == "statistics":
                    statistics = ParameterStatistics(model, lambda stats: None)

                    def measured(step=step, statistics=statistics, optimizer=optimizer):
                        statistics.attach(optimizer)
                        step()
                        statistics.close()
                        sync(args.device)

                    def baseline(step=step):
                        step()
                        sync(args.device)

                else:  # the scales are parameter groups: the baseline is the model without them
                    plain_model, _, _, _ = build_from_flags(flags, args, args.device)
                    plain = training_step(plain_model, criterion, Adam(plain_model.parameters(), lr=1e-4), samples)

                    def measured(step=step):
                        step()
                        sync(args.device)

                    def baseline(step=plain):
                        step()
                        sync(args.device)

                timing = timed_ratio(measured, baseline, args.rounds, min_run_time=1.0)
                rows.append(
                    {
                        "size": size,
                        "model": name,
                        "option": option,
                        "step_ms": 1000 * timing.seconds,
                        "baseline_step_ms": 1000 * timing.baseline_seconds,
                        "ratio": timing.ratio,
                    }
                )
                print(rows[-1], flush=True)
    env = environment(args.device)
    columns = [
        ("size", "size"),
        ("model", "model"),
        ("option", "option"),
        ("step_ms", "step (ms)"),
        ("baseline_step_ms", "without it (ms)"),
        ("ratio", "time ratio"),
    ]
    write_report(
        f"parameter_stats_{args.device}",
        "The cost of --log-parameter-stats and of per-factor lr scales per training step",
        env,
        columns,
        rows,
        notes="Ratio: the median over alternating rounds of (step time with the option / without it); "
        "1.00 is free. Steps of fairseq's Adam on Multi30k en-de batches of 4,096 tokens.",
        directory=Path(args.out),
    )


if __name__ == "__main__":
    main()
