"""torch.compile (inductor) against eager execution on the CPU: training words/s and decoding sentences/s
of a PHM Transformer and of its dense twin, on Multi30k.

    python -m benchmarks.bench_compile               # PHM n=4 and the dense twin, the iwslt size
    python -m benchmarks.bench_compile --quick       # the demo size, fewer rounds: checks that it runs

Training: ``model.compile(dynamic=True)`` in place (fairseq's criterion calls the model), Adam steps over
the same batches for the compiled model and an eager copy with the same weights, in alternating rounds.
Decoding: every encoder and decoder layer compiled in place (fairseq's generator drives the layers through
its own loops and incremental state), the model merged as fairseq-generate prepares it, beam 5, one
sentence at a time and every output forced to the same length. Compilation happens in warm-up calls
before any timing; its seconds are reported apart. Each ratio is compiled speed over eager speed, the
median of rounds that alternate the two. Writes benchmarks/results/compile_cpu.{json,md}.
"""

import argparse
import copy
import time

import torch

from .bench_translation import batches, build_from_flags, generation, training_step
from .common import REPO, default_threads, environment, prepare_multi30k, timed_ratio, write_report

MODELS = {  # name -> fairseq-train arguments ({size}: the architecture size)
    "PHM n=4": ["--arch", "phm_transformer_{size}", "--phm-n", "4"],
    "dense twin": ["--arch", "transformer_twin_{size}"],
}


RECOMPILE_LIMIT = 64  # TorchDynamo's default, 8 graphs per function, is below the decoder layers' needs


def compile_layers(model) -> None:
    """Compiles every encoder and decoder layer in place, the way the generator reaches them."""
    for side in (model.encoder, model.decoder):
        for layer in side.layers:
            layer.compile(dynamic=True)


def warm(fn) -> float:
    """Seconds of a first call (for a compiled model: the compilation, mostly)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(name, args, train_samples, single, tokens_per_step):
    torch._dynamo.reset()  # no graph, guard or recompilation count carried over from another model
    flags = MODELS[name]
    eager, criterion, task, _ = build_from_flags(flags, args, "cpu")
    trained = copy.deepcopy(eager)
    trained.compile(dynamic=True)
    steps = {
        "compiled": training_step(trained, criterion, torch.optim.Adam(trained.parameters(), lr=1e-4), train_samples),
        "eager": training_step(eager, criterion, torch.optim.Adam(eager.parameters(), lr=1e-4), train_samples),
    }
    eager_warm, compile_train_s = warm(steps["eager"]), warm(steps["compiled"])
    for step in steps.values():  # a second step: the optimizer's state exists, shapes seen
        step()
    train = timed_ratio(steps["compiled"], steps["eager"], args.rounds)

    decoder = copy.deepcopy(eager)
    compile_layers(decoder)
    decode = {
        "compiled": generation(decoder, task, single, args.length),
        "eager": generation(eager, task, single, args.length),
    }
    warm(decode["eager"])
    compile_decode_s = warm(decode["compiled"])
    decoding = timed_ratio(decode["compiled"], decode["eager"], args.rounds)
    row = {
        "model": name,
        "train_wps_eager": tokens_per_step / train.baseline_seconds,
        "train_wps_compiled": tokens_per_step / train.seconds,
        "train_ratio": 1 / train.ratio,
        "decode_sps_eager": len(single) / decoding.baseline_seconds,
        "decode_sps_compiled": len(single) / decoding.seconds,
        "decode_ratio": 1 / decoding.ratio,
        "compile_train_s": compile_train_s - eager_warm,
        "compile_decode_s": compile_decode_s,
    }
    print(
        f"{name}: training {row['train_ratio']:.3f}x, decoding {row['decode_ratio']:.3f}x compiled over eager "
        f"(compilation {row['compile_train_s']:.0f} s training, {row['compile_decode_s']:.0f} s decoding)",
        flush=True,
    )
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", default=str(REPO / "data-bin" / "multi30k.en-de"))
    parser.add_argument("--size", default="iwslt", choices=["demo", "iwslt", "base"], help="architecture size")
    parser.add_argument("--rounds", type=int, default=5, help="alternating timing rounds")
    parser.add_argument("--train-batches", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=2048)
    parser.add_argument("--sentences", type=int, default=20, help="test sentences decoded one at a time per round")
    parser.add_argument("--length", type=int, default=20, help="forced output length when decoding")
    parser.add_argument("--quick", action="store_true", help="demo size, 2 rounds, 4 sentences (writes no report)")
    args = parser.parse_args()
    if args.quick:
        args.size, args.rounds, args.sentences, args.train_batches = "demo", 2, 4, 2
    prepare_multi30k(args.data)
    default_threads()
    # each layer instance and each state of its incremental cache (first step, later steps) is a graph
    torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    _, _, task, _ = build_from_flags(MODELS["dense twin"], args, "cpu")
    train_samples = batches(task, "train", args.train_batches, "cpu", max_tokens=args.max_tokens)
    single = batches(task, "test", args.sentences, "cpu", max_sentences=1)
    tokens_per_step = sum(s["ntokens"] for s in train_samples) / len(train_samples)
    rows = [measure(name, args, train_samples, single, tokens_per_step) for name in MODELS]
    if args.quick:
        return
    columns = [
        ("model", "model"),
        ("train_wps_eager", "training words/s, eager"),
        ("train_wps_compiled", "compiled"),
        ("train_ratio", "compiled / eager"),
        ("decode_sps_eager", "one-sentence decoding sent./s, eager"),
        ("decode_sps_compiled", "compiled"),
        ("decode_ratio", "compiled / eager"),
        ("compile_train_s", "compilation s (training)"),
        ("compile_decode_s", "compilation s (decoding)"),
    ]
    notes = (
        f"`{args.size}` size, untrained weights (seed 1), Multi30k en-de. Training: Adam steps over "
        f"{len(train_samples)} batches of max-tokens {args.max_tokens} ({tokens_per_step:.0f} target tokens each), "
        f"dropout 0.1, `model.compile(dynamic=True)` with inductor. Decoding: {len(single)} test sentences one at "
        f"a time, beam 5, lenpen 0.6, every output forced to {args.length} tokens, every encoder and decoder layer "
        f"compiled (`layer.compile(dynamic=True)`, TorchDynamo's recompile_limit raised to {RECOMPILE_LIMIT}), the "
        f"layers merged as fairseq-generate prepares them. Ratios: "
        f"compiled speed over eager speed, medians of {args.rounds} alternating rounds; compilation: the first "
        f"call's extra seconds (training: over an eager first step)."
    )
    path = write_report(
        "compile_cpu", "torch.compile against eager on the CPU", environment("cpu"), columns, rows, notes
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
