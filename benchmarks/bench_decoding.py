"""Translation at the `base` size (4+4 layers, 512, FFN 2048, 8 heads) against the dense twin: decoding
one sentence at a time (beam 5), batched decoding (128 sentences a batch), training words/s, and a
profile of where a decoding step spends its time.

    python -m benchmarks.bench_decoding               # Multi30k en-de, fp32 on this CPU, every core
    python -m benchmarks.bench_decoding --quick       # fewer sentences and rounds
    python -m benchmarks.bench_decoding --report decoding_options_cpu --models "PHM n=4" \
        "PHM n=4, Q, K, V separate" "PHM n=4, Q, K, V separate, + rank 8" \
        "PHM n=4, Q, K, V separate, factor norm" "PHM n=4, dense attention" "PHM n=8, Q, K, V separate, + rank 8"
                                                      # the frontier screen's options, each also against PHM n=4

Writes benchmarks/results/decoding_cpu.{json,md,png}. Every model decodes the same test sentences
with beam 5 and every output forced to the same length (min = max), so each does the same work
whatever its weights (they are untrained: speed does not depend on their values). Each ratio is the
median of rounds that alternate the model and the dense twin in this one process.
Targets: one sentence at a time, sentences/s against the dense twin: PHM n=4 >= 1.3x, n=8 >= 1.5x,
n=16 >= 1.6x, quaternion >= 1.3x; batched >= 1.0x; training words/s >= 0.97x at every n; and PHM
n=4 and n=8 with the layer's default choice of product (factored_crossover) at least as fast one
sentence at a time as the same model with every layer forced to the product with H.
"""

import argparse
import time
from collections import defaultdict

import torch
from torch import nn

from benchmarks.bench_translation import batches, build_from_flags, generation, training_step
from benchmarks.common import (
    REPO,
    RESULTS,
    default_threads,
    environment,
    prepare_multi30k,
    timed_ratio,
    write_report,
)
from phm_layers import PHMLinear, count_parameters

MODELS = {  # name -> (fairseq-train arguments, one-sentence target)
    "dense twin": (["--arch", "transformer_twin_base"], None),
    "quaternion": (["--arch", "quaternion_transformer_base"], 1.3),
    "PHM n=2": (["--arch", "phm_transformer_base", "--phm-n", "2"], None),
    "PHM n=4": (["--arch", "phm_transformer_base", "--phm-n", "4"], 1.3),
    "PHM n=8": (["--arch", "phm_transformer_base", "--phm-n", "8"], 1.5),
    "PHM n=16": (["--arch", "phm_transformer_base", "--phm-n", "16"], 1.6),
}
# the frontier screen's options (issue 56; configs/converged/multi30k_screen), by name with --models; each is
# also set against the plain PHM n=4 of the same run, whose one-sentence decoding it must not be slower than
SEPARATE = ["--arch", "phm_transformer_base", "--phm-n", "4", "--qkv-projection", "separate"]
OPTIONS = {
    "PHM n=4, Q, K, V separate": (SEPARATE, None),
    "PHM n=4, Q, K, V separate, + rank 8": ([*SEPARATE, "--phm-lowrank", "8"], None),
    "PHM n=4, Q, K, V separate, factor norm": ([*SEPARATE, "--phm-factor-norm"], None),
    "PHM n=4, dense attention": ([*SEPARATE, "--dense-attention"], None),
    "PHM n=8, Q, K, V separate, + rank 8": (
        ["--arch", "phm_transformer_base", "--phm-n", "8", "--qkv-projection", "separate", "--phm-lowrank", "8"],
        None,
    ),
}
# the same models with every PHM layer forced to the product with H (factored_max_rows 0): the
# default choice of product (factored_crossover) must never decode slower than these
H_ONLY = ("PHM n=4", "PHM n=8")
BATCHED_TARGET, TRAIN_TARGET = 1.0, 0.97


class StepProfile:
    """Where decoding spends its time, from forward hooks on the model's modules (wall time,
    inclusive; the hooks cost about a microsecond a call, the same for every model).

    linear maps: every PHM, quaternion or dense map of the layers (not the output projection);
    attention: the attention modules' own work besides their projections (scores, softmax,
    mixing, reshapes, the incremental state); output projection: the (tied, dense) embedding
    matrix over the vocabulary; other model work: embeddings, layer norms, residuals,
    activations; beam search and Python: what generate() does outside the model's forward.
    """

    PARTS = ("linear maps", "attention", "output projection", "other model work", "beam search and Python")

    def __init__(self, model):
        self.model, self.handles, self.unwrap = model, [], []
        self.seconds = defaultdict(float)
        self.inside_attention = 0
        for name, module in model.named_modules():
            if name.endswith("output_projection"):
                self._time(module, "output projection")
            elif isinstance(module, (PHMLinear, nn.Linear)):
                self._time(module, "linear maps")
            elif "Attention" in type(module).__name__:
                self._time(module, "attention with its maps", attention=True)
        # fairseq's generator calls encoder.forward and decoder.forward directly, past the hooks
        for side in (model.encoder, model.decoder):
            self._wrap_forward(side, "model")

    def _time(self, module, category, attention=False):
        starts = []

        def before(_module, _args):
            starts.append(time.perf_counter())
            self.inside_attention += attention

        def after(_module, _args, _output):
            elapsed = time.perf_counter() - starts.pop()
            self.inside_attention -= attention
            self.seconds[category] += elapsed
            if category == "linear maps" and self.inside_attention:
                self.seconds["linear maps in attention"] += elapsed

        self.handles += [module.register_forward_pre_hook(before), module.register_forward_hook(after)]

    def _wrap_forward(self, module, category):
        forward = module.forward

        def timed_forward(*args, **kwargs):
            start = time.perf_counter()
            try:
                return forward(*args, **kwargs)
            finally:
                self.seconds[category] += time.perf_counter() - start

        module.forward = timed_forward
        self.unwrap.append(module)

    def measure(self, decode) -> dict:
        """Runs ``decode`` once under the hooks; each part's share of its time."""
        self.seconds.clear()
        start = time.perf_counter()
        decode()
        total = time.perf_counter() - start
        for handle in self.handles:
            handle.remove()
        for module in self.unwrap:
            del module.forward  # back to the class's forward
        s = self.seconds
        attention = s["attention with its maps"] - s["linear maps in attention"]
        model = s["model"]
        parts = {
            "linear maps": s["linear maps"],
            "attention": attention,
            "output projection": s["output projection"],
            "other model work": model - s["linear maps"] - attention - s["output projection"],
            "beam search and Python": total - model,
        }
        return {"seconds": total, **{key: value / total for key, value in parts.items()}}


def profile_decoding(model, task, samples, length) -> dict:
    decode = generation(model, task, samples, length)
    decode()  # warm-up
    shares = StepProfile(model).measure(decode)
    shares["seconds_per_sentence"] = shares.pop("seconds") / sum(len(s["id"]) for s in samples)
    return shares


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    names = [r["model"] for r in rows]
    keys = [
        ("single_ratio", "one sentence at a time"),
        ("batched_ratio", "128 sentences a batch"),
        ("train_ratio", "training words/s"),
    ]
    width = 0.8 / len(keys)
    for i, (key, label) in enumerate(keys):
        left.bar([x + (i - 1) * width for x in range(len(rows))], [r[key] for r in rows], width, label=label)
    left.axhline(1.0, color="black", lw=0.8)
    left.set_xticks(range(len(rows)), names, rotation=15)
    left.set_ylabel("speed against the dense twin")
    left.legend(fontsize=8)
    parts = StepProfile.PARTS
    bottom = [0.0] * len(rows)
    for part in parts:
        values = [1000 * r["profile"]["seconds_per_sentence"] * r["profile"][part] for r in rows]
        right.bar(range(len(rows)), values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values)]
    right.set_xticks(range(len(rows)), names, rotation=15)
    right.set_ylabel("ms per sentence (beam 5), profiled")
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data-bin" / "multi30k.en-de"))
    parser.add_argument("--sentences", type=int, default=40, help="test sentences decoded one at a time per round")
    parser.add_argument("--batched-sentences", type=int, default=128, help="one batch of this many sentences")
    parser.add_argument("--length", type=int, default=20, help="forced output length")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--train-batches", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--quick", action="store_true", help="8 sentences, 2 rounds, two models")
    parser.add_argument(
        "--models",
        nargs="+",
        choices=[*MODELS, *OPTIONS],
        metavar="MODEL",
        help=f"only these, beside the dense twin (default: all of {list(MODELS)}; also: {list(OPTIONS)})",
    )
    parser.add_argument("--report", default="decoding_cpu", help="the report's name in benchmarks/results")
    args = parser.parse_args()
    prepare_multi30k(args.data)
    models = dict(list(MODELS.items())[:: 3 if args.quick else 1])
    if args.models:
        every = {**MODELS, **OPTIONS}
        models = {name: every[name] for name in every if name in {"dense twin", *args.models}}
    if args.quick:
        args.sentences, args.batched_sentences, args.rounds = 8, 16, 2
    default_threads()
    build_args = argparse.Namespace(data=args.data, size="base", max_tokens=args.max_tokens)
    built = {name: build_from_flags(flags, build_args, "cpu") for name, (flags, _) in models.items()}
    h_only = {}  # name -> the same model with every PHM layer on the product with H
    for name in (name for name in H_ONLY if name in built):
        h_only[name] = build_from_flags(models[name][0], build_args, "cpu")[0].eval()
        for module in h_only[name].modules():
            if isinstance(module, PHMLinear):
                module.factored_max_rows = 0
    dense, _, task, cfg = built["dense twin"]
    single = batches(task, "test", args.sentences, "cpu", max_sentences=1)
    batched = batches(task, "test", 1, "cpu", max_sentences=args.batched_sentences)
    train_samples = batches(task, "train", args.train_batches, "cpu", max_tokens=args.max_tokens)
    tokens_per_step = sum(s["ntokens"] for s in train_samples) / len(train_samples)

    def train_step(name):
        model, criterion, _, _ = built[name]
        return training_step(model, criterion, torch.optim.Adam(model.parameters(), lr=1e-4), train_samples)

    dense_single = generation(dense, task, single, args.length)
    dense_batched = generation(dense, task, batched, args.length)
    dense_train = train_step("dense twin")
    rows = []
    for name, (model, _, _, _) in built.items():
        target = models[name][1]
        single_s, dense_single_s, single_ratio, _ = timed_ratio(
            generation(model, task, single, args.length), dense_single, args.rounds
        )
        _, _, batched_ratio, _ = timed_ratio(generation(model, task, batched, args.length), dense_batched, args.rounds)
        train_s, _, train_ratio, _ = timed_ratio(train_step(name), dense_train, args.rounds)
        model.eval()
        row = {
            "model": name,
            "params_no_emb": count_parameters(model).without_embeddings,
            "single_sps": len(single) / single_s,
            "single_ratio": 1 / single_ratio,
            "single_target": target,
            "batched_ratio": 1 / batched_ratio,
            "train_wps": tokens_per_step / train_s,
            "train_ratio": 1 / train_ratio,
            "profile": profile_decoding(model, task, single[: max(4, len(single) // 4)], args.length),
            "over_h_only": None,
            "merged_over_unmerged": None,
        }
        if name in h_only:  # the default choice of product against H everywhere, one sentence at a time
            over = timed_ratio(
                generation(model, task, single, args.length),
                generation(h_only[name], task, single, args.length),
                args.rounds,
            )
            row["over_h_only"] = 1 / over.ratio
            # merged (fairseq-generate) against H built at every step (a plain eval loop, --eval-bleu)
            unmerged = timed_ratio(
                generation(model, task, single, args.length),
                generation(model, task, single, args.length, merged=False),
                args.rounds,
            )
            row["merged_over_unmerged"] = 1 / unmerged.ratio
        row["meets_targets"] = name == "dense twin" or (
            (target is None or row["single_ratio"] >= target)
            and row["batched_ratio"] >= BATCHED_TARGET
            and row["train_ratio"] >= TRAIN_TARGET
            and (row["over_h_only"] is None or row["over_h_only"] >= 1.0)
        )
        rows.append(row)
        shares = ", ".join(f"{k} {100 * v:.0f}%" for k, v in row["profile"].items() if k != "seconds_per_sentence")
        merged = (
            f"  merged vs H at every step {row['merged_over_unmerged']:.2f}x" if row["merged_over_unmerged"] else ""
        )
        print(
            f"{name:<12} one sentence {row['single_ratio']:.2f}x  batched {row['batched_ratio']:.2f}x  "
            f"train {row['train_ratio']:.3f}x{merged}  | {shares}",
            flush=True,
        )

    plain = next((row for row in rows if row["model"] == "PHM n=4"), None)
    for row in rows:  # flat columns for the table
        # against the plain PHM n=4: both measured against the same dense twin, alternating, in this process
        row["single_vs_phm_n4"] = row["single_ratio"] / plain["single_ratio"] if plain else None
        row["train_vs_phm_n4"] = row["train_ratio"] / plain["train_ratio"] if plain else None
        p = row["profile"]
        row["ms_per_sentence"] = 1000 * p["seconds_per_sentence"]
        for key in StepProfile.PARTS:
            row[f"share {key}"] = f"{100 * p[key]:.0f}%"
        linear_free = 1 / (1 - p["linear maps"])
        row["bound_if_linear_free"] = linear_free
    env = environment("cpu")
    columns = [
        ("model", "model"),
        ("params_no_emb", "params w/o emb."),
        ("single_sps", "one-sentence sent./s"),
        ("single_ratio", "vs dense"),
        ("single_target", "target"),
        ("batched_ratio", "batched vs dense"),
        ("train_wps", "train words/s"),
        ("train_ratio", "vs dense"),
        ("over_h_only", "one-sentence vs the same model with H only (target >= 1)"),
        ("merged_over_unmerged", "one-sentence merged vs H built at every step"),
        ("meets_targets", "meets targets"),
        ("single_vs_phm_n4", "one-sentence vs PHM n=4"),
        ("train_vs_phm_n4", "train vs PHM n=4"),
        ("ms_per_sentence", "profiled ms/sentence"),
        ("share linear maps", "linear maps"),
        ("share attention", "attention"),
        ("share output projection", "output proj."),
        ("share other model work", "other model"),
        ("share beam search and Python", "beam search + Python"),
        ("bound_if_linear_free", "speed-up if the linear maps cost nothing"),
    ]
    notes = (
        f"Data {args.data} (Multi30k en-de, joint BPE), `base` size, untrained weights (seed 1), shared embeddings. "
        f"One sentence at a time: {len(single)} test sentences, batch 1, beam 5, lenpen 0.6, every output forced to "
        f"{args.length} tokens; batched: {sum(len(s['id']) for s in batched)} sentences in one batch; training: Adam "
        f"steps over {len(train_samples)} batches of max-tokens {args.max_tokens} ({tokens_per_step:.0f} target tokens "
        f"each). Medians of {args.rounds} rounds alternating each model with the dense twin. The profile (one-sentence "
        f"decoding, forward hooks) gives each part's share of the time; the last column is the speed-up a model "
        f"would reach if its linear maps took no time at all."
    )
    if not args.quick:
        path = write_report(
            args.report,
            "Decoding at the base size: PHM and quaternion against the dense twin",
            env,
            columns,
            rows,
            notes,
        )
        plot(rows, RESULTS / f"{args.report}.png")
        print(f"wrote {path} (+ .json, .png)")


if __name__ == "__main__":
    main()
