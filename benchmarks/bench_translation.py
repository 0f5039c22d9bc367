"""PHM-Transformer (n = 2, 4, 8, 16) and Quaternion Transformer against their dense twin, on the
same data and dims: training words/s, generation sentences/s, peak training memory, checkpoint size.

    python -m benchmarks.bench_translation                 # Multi30k en-de, the paper's IWSLT size
    python -m benchmarks.bench_translation --device cuda   # the same on a GPU
    python -m benchmarks.bench_translation --device cuda --size base --models "dense twin" "PHM n=4"

Writes benchmarks/results/translation_<device>.{json,md,png} (translation_<device>_<size> at another
size than iwslt; --out: another folder), the report rewritten after every model. Targets: training words/s >= 0.95x
the dense twin (the paper's Table 3 has 0.96x at n=4), generation sentences/s >= 1.0x.
Training times the same batches for every model, in alternating rounds; generation decodes
the same test sentences with beam 5 and every output forced to the same length (min = max),
so that each model does the same work whatever its weights.
"""

import argparse
import io
from pathlib import Path

import torch

from phm_layers import PHMLinear

from .common import (
    REPO,
    RESULTS,
    default_threads,
    environment,
    fresh_process,
    peak_rss_during,
    prepare_multi30k,
    timed_ratio,
    write_report,
)

MODELS = {  # name -> fairseq-train arguments
    "dense twin": ["--arch", "transformer_twin_{size}"],
    "quaternion": ["--arch", "quaternion_transformer_{size}"],
    "quaternion + q-attention": ["--arch", "quaternion_transformer_{size}", "--quaternion-attention"],
    "PHM n=2": ["--arch", "phm_transformer_{size}", "--phm-n", "2"],
    "PHM n=4": ["--arch", "phm_transformer_{size}", "--phm-n", "4"],
    "PHM n=8": ["--arch", "phm_transformer_{size}", "--phm-n", "8"],
    "PHM n=16": ["--arch", "phm_transformer_{size}", "--phm-n", "16"],
}
TRAIN_TARGET, GENERATE_TARGET = 0.95, 1.0


def build(name, args, device):
    """Model, criterion and task for one row of MODELS."""
    return build_from_flags(MODELS[name], args, device)


def build_from_flags(flags, args, device):
    """Model, criterion and task from the model's fairseq-train arguments (``{size}``: args.size)."""
    from fairseq import options, tasks

    import phm_fairseq  # noqa: F401

    parser = options.get_training_parser()
    argv = [
        args.data,
        "--task",
        "translation",
        "--share-all-embeddings",
        "--max-tokens",
        str(args.max_tokens),
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--seed",
        "1",
        "--dropout",
        "0.1",
        *[a.format(size=args.size) for a in flags],
    ]
    cfg = options.parse_args_and_arch(parser, input_args=argv)
    task = tasks.setup_task(cfg)
    torch.manual_seed(1)
    model = task.build_model(cfg).to(device)
    return model, task.build_criterion(cfg), task, cfg


def batches(task, split, count, device, max_tokens=None, max_sentences=None):
    from fairseq import utils

    task.load_dataset(split)
    iterator = task.get_batch_iterator(
        task.dataset(split),
        max_tokens=max_tokens,
        max_sentences=max_sentences,
        max_positions=(1024, 1024),
        seed=1,
        required_batch_size_multiple=1,
    ).next_epoch_itr(shuffle=split == "train")
    return [utils.move_to_cuda(b) if device == "cuda" else b for b, _ in zip(iterator, range(count))]


def training_step(model, criterion, optimizer, samples):
    position = [0]

    def step():
        # each closure sets its model's mode: the dense twin's generation (eval) is timed
        # between its training steps, and eval mode would drop dropout from them
        model.train()
        sample = samples[position[0] % len(samples)]
        position[0] += 1
        loss, _, _ = criterion(model, sample)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def generation(model, task, samples, length, merged=True):
    """Decoding ``samples`` as fairseq-generate does (the hypercomplex layers merged); ``merged=False``:
    as a plain eval loop or fairseq-train's --eval-bleu does, building H at every step."""
    generator = task.build_generator(
        [model], argparse.Namespace(beam=5, lenpen=0.6, min_len=length, max_len_a=0, max_len_b=length)
    )

    def generate():
        model.eval()
        merge_for_inference(model, merged)  # after the training steps timed between rounds, which unmerge
        with torch.no_grad():
            for sample in samples:
                generator.generate([model], sample)

    return generate


def merge_for_inference(model, merged=True) -> None:
    """Every hypercomplex layer keeps one H, as fairseq-generate's prepare_for_inference_ makes it
    (which would also stop the model from training, as the rounds here do between generations)."""
    for module in model.modules():
        if isinstance(module, PHMLinear):
            module.merge() if merged else module.unmerge()


def checkpoint_mib(model) -> float:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.tell() / 2**20


def _peak_rss_child(name, args):
    model, criterion, task, cfg = build(name, args, "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    step = training_step(model, criterion, optimizer, batches(task, "train", 1, "cpu", max_tokens=cfg.max_tokens))
    print(peak_rss_during(step))


def peak_memory_mib(name, args) -> float:
    if args.device == "cuda":
        model, criterion, task, cfg = build(name, args, "cuda")
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        step = training_step(model, criterion, optimizer, batches(task, "train", 1, "cuda", max_tokens=cfg.max_tokens))
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        return (torch.cuda.max_memory_allocated() - base) / 2**20
    flags = ["--data", args.data, "--size", args.size, "--max-tokens", args.max_tokens]
    return int(fresh_process(__spec__.name, *flags, "--_peak-rss", name)) / 2**20


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["model"] for r in rows]
    keys = [
        ("train_ratio", "training words/s"),
        ("generate_ratio", "generation sentences/s"),
        ("memory_ratio", "peak training memory"),
        ("checkpoint_ratio", "checkpoint size"),
    ]
    fig, ax = plt.subplots(figsize=(9, 4))
    width = 0.8 / len(keys)
    for i, (key, label) in enumerate(keys):
        ax.bar([x + (i - 1.5) * width for x in range(len(rows))], [r[key] or 0 for r in rows], width, label=label)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.axhline(TRAIN_TARGET, color="C0", ls="--", lw=0.8)
    ax.set_xticks(range(len(rows)), names, rotation=15)
    ax.set_ylabel("ratio to the dense twin")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data-bin" / "multi30k.en-de"))
    parser.add_argument("--size", default="iwslt", choices=["demo", "iwslt", "base"], help="architecture size")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--train-batches", type=int, default=8, help="batches cycled through while timing")
    parser.add_argument("--rounds", type=int, default=7, help="alternating timing rounds")
    parser.add_argument("--sentences", type=int, default=256, help="test sentences decoded per round")
    parser.add_argument("--length", type=int, default=25, help="forced output length when decoding")
    parser.add_argument(
        "--models",
        nargs="+",
        default=list(MODELS),
        choices=list(MODELS),
        help="the dense twin and these (default: all)",
    )
    parser.add_argument("--min-run-time", type=float, default=0.2, help="seconds of calls per side and round")
    parser.add_argument("--no-memory", action="store_true", help="leave out peak memory (on CPU: a process each)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="the reports' folder (default: %(default)s)")
    parser.add_argument("--_peak-rss", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args._peak_rss:
        return _peak_rss_child(args._peak_rss, args)
    prepare_multi30k(args.data)

    default_threads()
    names = ["dense twin", *(name for name in MODELS if name in args.models and name != "dense twin")]
    built = {name: build(name, args, args.device) for name in names}
    dense_model, _, task, cfg = built["dense twin"]
    train_samples = batches(task, "train", args.train_batches, args.device, max_tokens=cfg.max_tokens)
    test_samples = batches(task, "test", -(-args.sentences // 64), args.device, max_sentences=64)

    def step_of(name):
        model, criterion, _, _ = built[name]
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        return training_step(model, criterion, optimizer, train_samples)

    dense_step = step_of("dense twin")
    dense_generate = generation(dense_model.eval(), task, test_samples, args.length)
    tokens_per_step = sum(s["ntokens"] for s in train_samples) / len(train_samples)
    sentences = sum(len(s["id"]) for s in test_samples)
    dense_checkpoint = checkpoint_mib(dense_model)
    dense_memory = None if args.no_memory else peak_memory_mib("dense twin", args)
    from phm_layers import count_parameters

    env = environment(args.device)
    name = f"translation_{args.device}" + ("" if args.size == "iwslt" else f"_{args.size}")
    timing = dict(rounds=args.rounds, min_run_time=args.min_run_time)
    rows = []
    for model_name, (model, _criterion, _task, _cfg) in built.items():
        model.train()
        step_s, dense_step_s, train_ratio, _ = timed_ratio(step_of(model_name), dense_step, **timing)
        model.eval()
        gen_s, dense_gen_s, gen_ratio, _ = timed_ratio(
            generation(model, task, test_samples, args.length), dense_generate, **timing
        )
        counts = count_parameters(model)
        memory = None if args.no_memory else peak_memory_mib(model_name, args)
        row = {
            "model": model_name,
            "params_no_emb": counts.without_embeddings,
            "train_wps": tokens_per_step / step_s,
            "dense_train_wps": tokens_per_step / dense_step_s,
            "train_ratio": 1 / train_ratio,  # words/s: the inverse of the time ratio
            "generate_sps": sentences / gen_s,
            "dense_generate_sps": sentences / dense_gen_s,
            "generate_ratio": 1 / gen_ratio,
            "peak_train_mib": memory,
            "memory_ratio": None if memory is None else memory / dense_memory,
            "checkpoint_mib": checkpoint_mib(model),
            "checkpoint_ratio": checkpoint_mib(model) / dense_checkpoint,
        }
        row["meets_targets"] = model_name == "dense twin" or (
            row["train_ratio"] >= TRAIN_TARGET and row["generate_ratio"] >= GENERATE_TARGET
        )
        rows.append(row)
        memory_text = "" if memory is None else f"  memory {row['memory_ratio']:.3f}x"
        print(
            f"{model_name:<26} train {row['train_ratio']:.3f}x  generate {row['generate_ratio']:.3f}x"
            f"{memory_text}  checkpoint {row['checkpoint_ratio']:.3f}x",
            flush=True,
        )
        title = f"Translation models against the dense twin ({args.device}, {args.size} size)"
        notes = report_notes(args, train_samples, tokens_per_step, sentences)
        report = write_report(name, title, env, COLUMNS, rows, notes, directory=args.out)
    plot(rows, args.out / f"{name}.png")
    print(f"wrote {report} (+ .json, .png)")


COLUMNS = [
    ("model", "model"),
    ("params_no_emb", "params w/o emb."),
    ("train_wps", "train words/s"),
    ("train_ratio", "vs dense"),
    ("generate_sps", "generate sent./s"),
    ("generate_ratio", "vs dense"),
    ("peak_train_mib", "peak train MiB"),
    ("memory_ratio", "vs dense"),
    ("checkpoint_mib", "checkpoint MiB"),
    ("checkpoint_ratio", "vs dense"),
    ("meets_targets", "meets targets"),
]


def report_notes(args, train_samples, tokens_per_step, sentences) -> str:
    memory = (
        "not measured (--no-memory)."
        if args.no_memory
        else "one training step with Adam, torch.cuda.max_memory_allocated."
        if args.device == "cuda"
        else "one training step with Adam, VmHWM in a fresh process."
    )
    return (
        f"Data {args.data} (Multi30k en-de, joint BPE), architecture size '{args.size}', "
        f"max-tokens {args.max_tokens}, shared embeddings. Training: Adam steps over the same "
        f"{len(train_samples)} batches ({tokens_per_step:.0f} target tokens each), medians over "
        f"{args.rounds} rounds alternating with the dense twin (>= {args.min_run_time} s of calls a side"
        + (", CUDA synchronised around each block" if args.device == "cuda" else "")
        + f"). Generation: beam 5 over {sentences} test sentences, outputs forced to {args.length} tokens, "
        f"eval mode (PHM weights cached). Peak memory: {memory} Checkpoint: the model's state_dict. "
        f"Targets: training >= {TRAIN_TARGET}x, generation >= {GENERATE_TARGET}x."
    )


if __name__ == "__main__":
    main()
