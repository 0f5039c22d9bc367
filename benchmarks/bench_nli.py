"""End to end NLI on a small budget: LSTM, quaternion LSTM, PHM-LSTM n=2/5/10, same budget each.

    python benchmarks/bench_nli.py                          # configs/nli_sick/*.yaml, seeds 1 2
    python benchmarks/bench_nli.py --seeds 1 2 3 --configs configs/nli_sick

For every config and seed: fairseq-train with the config's options (data made by its `prepare`
command when missing), then `phm-evaluate DATA --path .../checkpoint_best.pt --subset test
--json`; the encoder size comes from `phm-params --module encoder.lstm`. Writes
results/nli_sick.{json,md,png} (accuracy against parameters) with every command that was run.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, environment, write_report  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
ORDER = ["lstm", "quaternion_lstm", "phm_lstm_n2", "phm_lstm_n5", "phm_lstm_n10"]


def fairseq_options(options: dict) -> list:
    """The config's train section as command-line options (true = a bare flag)."""
    argv = []
    for key, value in options.items():
        if value is True:
            argv.append(f"--{key}")
        elif value not in (False, None):
            argv += [f"--{key}", str(value)]
    return argv


def run(cmd: list, env: dict, log: Path = None) -> subprocess.CompletedProcess:
    out = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=REPO, env=env)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        sys.exit(f"failed ({out.returncode}): {shlex.join(map(str, cmd))}\n{(out.stdout + out.stderr)[-3000:]}")
    return out


def last_json(out: subprocess.CompletedProcess) -> dict:
    return json.loads(out.stdout.strip().splitlines()[-1])


def plot(rows, majority, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    for i, row in enumerate(sorted(rows, key=lambda r: r["encoder_params"])):
        x = row["encoder_params"]
        ax.scatter([x] * len(row["accuracies"]), row["accuracies"], color="C0", alpha=0.4, s=14)
        ax.errorbar(x, row["accuracy_mean"], yerr=row["accuracy_std"], fmt="o", color="C0", capsize=3)
        # labels alternate above and below, so that neighbours of equal accuracy stay readable
        ax.annotate(row["model"], (x, row["accuracy_mean"]), textcoords="offset points",
                    xytext=(6, 8 if i % 2 else -14), fontsize=8)
    ax.axhline(majority, color="gray", ls=":", lw=1, label=f"majority class {majority:.1f}%")
    ax.set_xscale("log")
    ax.set_xlabel("encoder (LSTM) parameters")
    ax.set_ylabel("SICK trial accuracy (%)")
    ax.set_title("NLI, same budget each: accuracy against parameters", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--configs", default="configs/nli_sick", help="folder of configs (repo-relative)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=1,
                        help="OMP threads per training run (default 1: the CPU is shared; one thread is also "
                             "much faster than two under load)")
    parser.add_argument("--work", default="work/bench_nli", help="checkpoints and logs (repo-relative)")
    parser.add_argument("--name", default="nli_sick", help="report name under benchmarks/results/")
    parser.add_argument("--plot-only", action="store_true", help="redraw results/NAME.png from results/NAME.json")
    args = parser.parse_args()
    if args.plot_only:
        saved = json.loads((RESULTS / f"{args.name}.json").read_text())
        return plot(saved["rows"], saved["majority_accuracy"], RESULTS / f"{args.name}.png")
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "OMP_NUM_THREADS": str(args.threads)}
    configs = sorted((REPO / args.configs).glob("*.yaml"),
                     key=lambda p: ORDER.index(p.stem) if p.stem in ORDER else len(ORDER))
    rows, commands, majority = [], [], None
    for config in configs:
        spec = yaml.safe_load(config.read_text())
        data = REPO / spec["data"]
        if not data.exists():
            print(f"preparing {spec['data']}: {spec['prepare']}", flush=True)
            subprocess.run(spec["prepare"], shell=True, cwd=REPO, env=env, check=True)
            commands.append(spec["prepare"])
        options = fairseq_options(spec["train"])
        params_cmd = ["phm-params", "--json", spec["data"], *options]
        encoder_cmd = ["phm-params", "--json", "--module", "encoder.lstm", spec["data"], *options]
        whole, encoder = last_json(run(params_cmd, env)), last_json(run(encoder_cmd, env))
        commands += [shlex.join(encoder_cmd)]
        accuracies, seconds = [], []
        for seed in args.seeds:
            run_dir = REPO / args.work / config.stem / f"seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            train_cmd = ["fairseq-train", spec["data"], *options, "--seed", seed,
                         "--save-dir", run_dir / "checkpoints", "--log-format", "simple", "--no-progress-bar"]
            start = time.perf_counter()
            run(train_cmd, env, log=run_dir / "train.log")
            seconds.append(time.perf_counter() - start)
            eval_cmd = ["phm-evaluate", spec["data"], "--path", run_dir / "checkpoints" / "checkpoint_best.pt",
                        "--subset", spec["evaluate"]["subset"], "--json"]
            report = last_json(run(eval_cmd, env, log=run_dir / "evaluate.log"))
            accuracies.append(report["accuracy"])
            majority = 100.0 * max(map(sum, report["confusion"])) / report["examples"]
            examples = report["examples"]
            commands += [f"OMP_NUM_THREADS={args.threads} " + shlex.join(map(str, train_cmd)),
                         shlex.join(map(str, eval_cmd))]
            print(f"{config.stem:<16} seed {seed}: accuracy {report['accuracy']:.2f}% on {examples} examples, "
                  f"trained in {seconds[-1]:.0f} s", flush=True)
        rows.append({
            "model": spec["description"].split(": ")[-1].split(" trained")[0],
            "config": os.path.relpath(config, REPO),
            "encoder_params": encoder["total"],
            "paper_encoder_params": spec.get("paper", {}).get("parameters"),
            "trainable_params": whole["trainable"],
            "seeds": " ".join(map(str, args.seeds)),
            "accuracies": accuracies,
            "accuracy_mean": statistics.mean(accuracies),
            "accuracy_std": statistics.stdev(accuracies) if len(accuracies) > 1 else 0.0,
            "train_seconds_mean": statistics.mean(seconds),
            "test_examples": examples,
        })
    env_info = environment("cpu")
    env_info["threads"] = args.threads
    columns = [("model", "model"), ("encoder_params", "encoder params"), ("paper_encoder_params", "Table 1 params"),
               ("trainable_params", "trainable params (whole model)"), ("seeds", "seeds"),
               ("accuracy_mean", "accuracy % (mean)"), ("accuracy_std", "std"), ("train_seconds_mean", "train s (mean)")]
    first = yaml.safe_load(configs[0].read_text())
    notes = (
        f"Data: {first['data']} ({first['prepare']}): SICK train less 500 held-out pairs for validation, tested on "
        f"all {examples} SICK trial pairs; majority class {majority:.1f}%. Same budget for every model: the "
        f"configs in {args.configs}/ ({first['train']['max-epoch']} epochs, Adam lr {first['train']['lr']}, batch "
        f"{first['train']['batch-size']}, fixed 50-d GloVe projected to the 300-d encoder), best epoch on valid. "
        f"Per-seed accuracies: "
        + "; ".join(f"{r['model']} {', '.join(f'{a:.1f}' for a in r['accuracies'])}" for r in rows)
        + f". Training used {args.threads} thread(s) on a CPU shared with other jobs: times are indicative only."
        + "\n\nCommands:\n\n" + "\n".join(f"    {c}" for c in commands)
    )
    write_report(args.name, "NLI: accuracy and parameters, same budget each", env_info, columns, rows, notes)
    data = json.loads((RESULTS / f"{args.name}.json").read_text())
    data.update(commands=commands, majority_accuracy=majority)
    (RESULTS / f"{args.name}.json").write_text(json.dumps(data, indent=2) + "\n")
    plot(rows, majority, RESULTS / f"{args.name}.png")
    print(f"wrote {RESULTS / args.name}.md (+ .json, .png)")


if __name__ == "__main__":
    main()
