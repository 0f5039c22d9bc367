"""phm-run: run experiments from configs/ (prepare data, train, evaluate), resuming what is done.

    phm-run configs/small/multi30k/phm_n4.yaml configs/small/multi30k/transformer.yaml
    phm-run configs/table2            # every config below a folder, in name order

Each run lives in RUNS/<config path under configs/, without .yaml>/seed<S>/ (RUNS defaults to
work/runs; S is the config's seed, or each of --seeds): checkpoints/, train.log, evaluate.log
and result.json, which holds the score,
the parameter counts, training and evaluation speed, the seed, the exact commands and the
versions. A run whose result.json matches its config is skipped; an interrupted run resumes
from checkpoints/checkpoint_last.pt (fairseq-train's own resume).

A config is YAML:

    description: "Table 3, IWSLT'14 de-en speed, PHM-Transformer n=4"
    paper: {seconds_per_100_updates: 7.92, inference_seconds: 299}   # the paper's figures (optional)
    data: data-bin/iwslt14.de-en      # relative to the working directory
    prepare: bash data-prep/iwslt14.sh -s de -t en   # run when `data` has no dictionary
    seed: 1                           # --seeds S [S ...] runs every config once per seed instead
    count_module: encoder.lstm        # also count this submodule's parameters (the paper's figure; optional)
    train: {task: translation, arch: phm_transformer_iwslt, phm-n: 4, ...}  # fairseq-train options
    evaluate:
      kind: bleu                      # fairseq-generate, then sacrebleu on the detokenized output
      reference: "{data}/raw/test.en"
      generate: {gen-subset: test, beam: 5, lenpen: 0.6, ...}  # fairseq-generate options
    # or  evaluate: {kind: accuracy, subset: test}   (phm-evaluate, for classification tasks)

Option values may use {data} and {run}; true stands for a bare flag, false or null leave it out.
`extends: _base.yaml` starts from another config (a path relative to this one) and overrides
it key by key; null removes a key. Files named _*.yaml are such bases and are not run.
"""

import argparse
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import yaml

PLUGIN_DIR = Path(__file__).resolve().parent.parent  # passed to fairseq as --user-dir
CHECKPOINT = "checkpoints/checkpoint_best.pt"


class ConfigError(ValueError):
    pass


def merge(base: dict, override: dict) -> dict:
    """``override`` on top of ``base``, mappings merged key by key; a null value drops the key."""
    merged = dict(base)
    for key, value in override.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_config(path: Path, seen=()) -> dict:
    if path in seen:
        raise ConfigError(f"{path}: `extends` loops back to itself")
    try:
        config = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read the config: {error}") from None
    if "extends" in config:
        config = merge(read_config((path.parent / config.pop("extends")).resolve(), (*seen, path)), config)
    return config


def load_config(path: Path) -> dict:
    config = read_config(path.resolve())
    missing = [key for key in ("data", "train", "evaluate") if key not in config]
    if missing:
        raise ConfigError(f"{path}: missing key(s) {', '.join(missing)} (see `phm-run --help`)")
    kind = config["evaluate"].get("kind")
    if kind not in EVALUATORS:
        raise ConfigError(f"{path}: evaluate.kind must be one of {', '.join(EVALUATORS)}, not {kind!r}")
    return config


def options(mapping: dict, **fields) -> list:
    """{"max-tokens": 4096, "share-all-embeddings": True} -> ["--max-tokens", "4096", "--share-all-embeddings"]"""
    args = []
    for key, value in mapping.items():
        if value is None or value is False:
            continue
        args.append(f"--{key}")
        if value is not True:
            args.append(str(value).format(**fields))
    return args


def run_logged(command: list, log: Path) -> str:
    """Runs a command, showing its output as it comes and keeping it in ``log``."""
    print(f"$ {shlex.join(command)}", flush=True)
    # the commands of this Python environment (fairseq-train, sacremoses, ...) come first, so
    # that runs and data preparation use the installation the runner belongs to
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    lines = []
    with open(log, "a") as log_file, subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1, env=env
    ) as process:
        log_file.write(f"$ {shlex.join(command)}\n")
        for line in process.stdout:
            sys.stdout.write(line)
            log_file.write(line)
            lines.append(line)
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command, output="".join(lines[-30:]))
    return "".join(lines)


def fairseq_log_stats(log: str, tag: str) -> list:
    """fairseq's simple-format log lines of one kind, as dicts: epoch summaries
    (``| train | epoch 001 | loss 4.2 | ...``) and progress lines (``| train_inner | ... loss=4.2, ...``)."""
    stats = []
    for line in log.splitlines():
        if f"| {tag} |" not in line:
            continue
        text = line.split(f"| {tag} |", 1)[1]
        pairs = re.findall(r"(\w+)=([^,\s]+)", text) or [
            tuple(field.split()) for field in text.split("|") if len(field.split()) == 2]
        entry = {}
        for key, value in pairs:
            try:
                entry[key] = float(value)
            except ValueError:
                entry[key] = value
        stats.append(entry)
    return stats


def training_speed(log: str) -> dict:
    """Seconds in training steps (not validation or checkpointing) and words per second over the
    epochs this fairseq-train process ran, from its epoch summaries. A resumed run counts only
    the updates after the checkpoint it loaded."""
    resumed = re.search(r"Loaded checkpoint .* @ (\d+) updates\)", log)
    previous = int(resumed.group(1)) if resumed else 0
    seconds = words = updates = 0
    for epoch in fairseq_log_stats(log, "train"):
        count = int(epoch["num_updates"]) - previous
        previous = int(epoch["num_updates"])
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


def train(config: dict, fields: dict, run_dir: Path) -> dict:
    train_options = dict(config["train"])
    command = [
        "fairseq-train", fields["data"], "--user-dir", str(PLUGIN_DIR),
        "--save-dir", str(run_dir / "checkpoints"), "--seed", str(config["seed"]),
        "--log-format", "simple", *options(train_options, **fields),
    ]
    started = time.time()
    log = run_logged(command, run_dir / "train.log")
    epochs = fairseq_log_stats(log, "train")
    valid = fairseq_log_stats(log, "valid")
    last = epochs[-1] if epochs else {}
    return {
        "command": shlex.join(command),
        "updates": int(last.get("num_updates", 0)),
        "epochs": len(epochs),
        **training_speed(log),
        "final_train_loss": last.get("loss"),
        "best_valid_loss": min((v["loss"] for v in valid if "loss" in v), default=None),
        "wall_seconds": round(time.time() - started, 1),
    }


def evaluate_bleu(config: dict, fields: dict, run_dir: Path) -> dict:
    import sacrebleu

    spec = config["evaluate"]
    command = [
        "fairseq-generate", fields["data"], "--user-dir", str(PLUGIN_DIR),
        "--path", str(run_dir / CHECKPOINT), *options(spec.get("generate", {}), **fields),
    ]
    log = run_logged(command, run_dir / "evaluate.log")
    hypotheses = {}
    for line in log.splitlines():
        if line.startswith("D-"):
            index, _score, *text = line.split("\t")
            hypotheses[int(index[2:])] = text[0] if text else ""
    reference_path = Path(spec["reference"].format(**fields))
    references = reference_path.read_text(encoding="utf-8").splitlines()
    if sorted(hypotheses) != list(range(len(references))):
        raise RuntimeError(
            f"fairseq-generate translated {len(hypotheses)} sentences, but {reference_path} has "
            f"{len(references)} references: every sentence must be scored (see {run_dir}/evaluate.log)"
        )
    ordered = [hypotheses[i] for i in range(len(references))]
    (run_dir / "hypotheses.txt").write_text("\n".join(ordered) + "\n", encoding="utf-8")
    bleu = sacrebleu.metrics.BLEU()
    score = bleu.corpus_score(ordered, [references])
    speed = re.search(r"Translated ([\d,]+) sentences .* in ([\d.]+)s \(([\d.]+) sentences/s", log)
    return {
        "command": shlex.join(command),
        "metric": "bleu",
        "score": round(score.score, 2),
        "sacrebleu": f"{score} {bleu.get_signature()}",
        "examples": len(references),
        "seconds": float(speed.group(2)) if speed else None,
        "examples_per_second": float(speed.group(3)) if speed else None,
    }


def evaluate_accuracy(config: dict, fields: dict, run_dir: Path) -> dict:
    spec = config["evaluate"]
    command = [
        "phm-evaluate", fields["data"], "--path", str(run_dir / CHECKPOINT),
        "--subset", spec.get("subset", "test"), "--json",
    ]
    log = run_logged(command, run_dir / "evaluate.log")
    result = json.loads(log.strip().splitlines()[-1])
    return {"command": shlex.join(command), "metric": "accuracy", "score": round(result["accuracy"], 2), **result}


EVALUATORS = {"bleu": evaluate_bleu, "accuracy": evaluate_accuracy}


def count_parameters_of(checkpoint: Path, module=None) -> dict:
    """Counts of the trained model (see phm_fairseq.modules.count_parameters), and of one of its
    submodules when ``module`` names one (Table 1 counts the LSTM encoder, Table 5 the layers)."""
    from fairseq import checkpoint_utils

    import phm_fairseq  # noqa: F401  (registers the models the checkpoint names)
    from phm_fairseq.modules import count_parameters

    models, _cfg, _task = checkpoint_utils.load_model_ensemble_and_task([str(checkpoint)])
    counts = count_parameters(models[0]).as_dict()
    if module:
        counts["module"] = {"name": module, **count_parameters(models[0].get_submodule(module)).as_dict()}
    return counts


def is_prepared(data: Path) -> bool:
    """data-prep scripts write prep.json last; data binarized by hand has its dictionaries."""
    return (data / "prep.json").exists() or any(data.glob("dict*.txt")) or any(data.glob("*/dict*.txt"))


def run_directory(config_path: Path, runs_dir: Path, seed) -> Path:
    parts = config_path.resolve().with_suffix("").parts
    relative = parts[len(parts) - parts[::-1].index("configs"):] if "configs" in parts else parts[-1:]
    return runs_dir.joinpath(*relative, f"seed{seed}")


def run(config_path: Path, runs_dir: Path, seed=None, force: bool = False) -> dict:
    from phm_fairseq.provenance import environment

    config = load_config(config_path)
    if seed is not None:
        config["seed"] = seed
    config.setdefault("seed", 1)
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    run_dir = run_directory(config_path, runs_dir, config["seed"])
    result_path = run_dir / "result.json"
    if result_path.exists() and not force:
        result = json.loads(result_path.read_text())
        if result.get("config_sha256") == digest:
            print(f"== {config_path}: done already ({result_path})", flush=True)
            return result
    run_dir.mkdir(parents=True, exist_ok=True)
    fields = {"data": config["data"], "run": str(run_dir)}

    prepared = None
    if not is_prepared(Path(config["data"])):
        if not config.get("prepare"):
            raise ConfigError(f"{config_path}: {config['data']} holds no fairseq data and the config has no `prepare` command")
        prepared = config["prepare"].format(**fields)
        print(f"== {config_path}: preparing {config['data']}", flush=True)
        run_logged(shlex.split(prepared), run_dir / "prepare.log")

    print(f"== {config_path}: training", flush=True)
    training = train(config, fields, run_dir)
    print(f"== {config_path}: evaluating", flush=True)
    evaluation = EVALUATORS[config["evaluate"]["kind"]](config, fields, run_dir)
    result = {
        "config": str(config_path),
        "config_sha256": digest,
        "description": config.get("description", ""),
        "paper": config.get("paper", {}),
        "seed": config["seed"],
        "arch": config["train"].get("arch"),
        "prepare_command": prepared,
        "parameters": count_parameters_of(run_dir / CHECKPOINT, config.get("count_module")),
        "training": training,
        "evaluation": evaluation,
        "environment": environment(),
    }
    result_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"== {config_path}: {evaluation['metric']} {evaluation['score']} -> {result_path}", flush=True)
    return result


def expand(paths) -> list:
    configs = []
    for path in map(Path, paths):
        if path.is_dir():  # files named _*.yaml are bases for others to extend
            configs += sorted(p for p in path.rglob("*.yaml") if not p.name.startswith("_"))
        elif path.is_file():
            configs.append(path)
        else:
            raise ConfigError(f"no config at {path}")
    return configs


def main(argv=None):
    parser = argparse.ArgumentParser(prog="phm-run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", help="config files or folders of them")
    parser.add_argument("--runs-dir", type=Path, default=Path("work/runs"), help="where runs live (default: %(default)s)")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="S",
                        help="run every config once per seed (default: the config's own seed)")
    parser.add_argument("--force", action="store_true",
                        help="run again even if result.json is up to date (training resumes from its last checkpoint)")
    args = parser.parse_args(argv)
    try:
        configs = expand(args.configs)
        for config in configs:
            load_config(config)  # every config is checked before the first one runs
        jobs = [(config, seed) for config in configs for seed in (args.seeds or [None])]
        for i, (config, seed) in enumerate(jobs, 1):
            print(f"\n=== [{i}/{len(jobs)}] {config}" + (f", seed {seed}" if seed is not None else ""), flush=True)
            run(config, args.runs_dir, seed=seed, force=args.force)
    except ConfigError as error:
        parser.exit(2, f"phm-run: error: {error}\n")
    except subprocess.CalledProcessError as error:
        parser.exit(1, f"phm-run: error: `{shlex.join(error.cmd)}` failed with exit code {error.returncode}\n")


if __name__ == "__main__":
    main()
