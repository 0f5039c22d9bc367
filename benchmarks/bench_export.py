"""A PHM-Transformer deployed without the plugin: BLEU, sentences/s and bytes on disk of fairseq-generate on
the PHM checkpoint, fairseq-generate on its export to fairseq's transformer (phm-export) and CTranslate2
float32 and int8 (phm-export --format ctranslate2), one sentence at a time and batched.

    python -m benchmarks.bench_export                   # the demo model (trains it if absent) and the base size
    python -m benchmarks.bench_export --checkpoint work/runs/small/multi30k/phm_n4/seed1/checkpoints/checkpoint_best.pt
    python -m benchmarks.bench_export --quick           # a tiny model trained here on 2,000 pairs: checks it runs
    python -m benchmarks.bench_export --quality CKPT... # BLEU only, of trained models (e.g. converged ones)

Writes benchmarks/results/export_cpu.{json,md} (--quick: work/bench_export_quick/export_cpu_quick.*;
--quality: export_quality_cpu.*).
- demo: make demo's PHM-Transformer n=4 (configs/small/multi30k/phm_n4.yaml, trained by phm-run unless
  --checkpoint is given) on the Multi30k test set: BLEU (sacrebleu, detokenized, against raw/test.de) and speed
  from the same runs. Target: CTranslate2 int8 BLEU within 0.3 of fairseq-generate's on the PHM checkpoint.
- base: the base size (4+4 layers, 512, FFN 2048, 8 heads), PHM n=4 after one update (speed only, no BLEU):
  every output forced to --length tokens, on the first --base-sentences test sentences.
fairseq-generate runs as a command (its own timer: generation only, model loading excluded); the PHM
checkpoint with fairseq's default product rule (the factored product where factored_crossover says:
never at the demo size, the base size's FFN and fused Q/K/V maps one sentence at a time). CTranslate2 runs
in this process (translate_batch timed; tokenization and BPE outside the timer, as they are outside
fairseq-generate's). Beam 5, length penalty 0.6; batched: 128 sentences a batch. Every figure is the median
of --rounds runs that alternate the engines. Model bytes: the PHM model's weights (its checkpoint without
optimizer state), the exported checkpoint file, the CTranslate2 directory.
- --quality: what int8 costs a model trained to convergence (the demo model is trained 4 epochs): BLEU of
  fairseq-generate and of CTranslate2 float32 and int8, batched, once; no speed, which is measured above
  (these checkpoints live where their long runs trained, a machine that is seldom quiet).
"""

import argparse
import io
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from .common import REPO, RESULTS, environment, multi30k_sample, prepare_multi30k, write_report

DEMO_CONFIG = "configs/small/multi30k/phm_n4.yaml"
DEMO_RUN = REPO / "work" / "runs" / "small" / "multi30k" / "phm_n4" / "seed1"
DEMO_CHECKPOINT = DEMO_RUN / "checkpoints" / "checkpoint_best.pt"
ENGINES = ("fairseq PHM", "fairseq exported", "CTranslate2 float32", "CTranslate2 int8")
MODES = {"one at a time": 1, "batched": 128}
TARGET_BLEU_GAP = 0.3
TINY = "--encoder-layers 1 --decoder-layers 1 --encoder-embed-dim 32 --decoder-embed-dim 32 "
TINY += "--encoder-ffn-embed-dim 64 --decoder-ffn-embed-dim 64 --encoder-attention-heads 2 --decoder-attention-heads 2"


def shown(value) -> str:
    """A command-line argument as the report shows it: paths inside the repository relative to it."""
    path = Path(value).resolve() if isinstance(value, Path) else None
    return os.path.relpath(path, REPO) if path is not None and path.is_relative_to(REPO) else str(value)


class Commands:
    """Runs commands (from the repository root, with the benchmark's threads) and records them for the report."""

    def __init__(self, threads: int):
        self.bin = Path(sys.executable).parent
        # data-prep finds sacremoses, subword-nmt and fairseq-preprocess on PATH: this environment's
        path = f"{self.bin}{os.pathsep}{os.environ['PATH']}"
        self.env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PATH": path}
        self.log = []

    def __call__(self, *argv, record=True, done=False):
        """Runs ``argv`` unless ``done`` (what it makes is there already); either way the report lists it."""
        argv = [shown(a) for a in argv]
        if record:
            self.log.append(shlex.join(argv))
        if done:
            return None
        if (self.bin / argv[0]).exists():
            argv[0] = str(self.bin / argv[0])
        result = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, env=self.env)
        if result.returncode:
            raise RuntimeError(f"{shlex.join(argv)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}")
        return result


def quick_corpus(work: Path, run: Commands) -> Path:
    """2,000 Multi30k en-de training pairs (100 valid, 100 test) with 1,000 BPE merges, as the tests use."""
    data = work / "multi30k_2k"
    command = ["bash", "data-prep/multi30k.sh", "--src-dir", work / "src", "--out", data, "--bpe-size", 1000]
    if (data / "prep.json").exists():
        run(*command, done=True)
        return data
    multi30k_sample(work / "src")
    run(*command)
    return data


def train(run: Commands, data: Path, save_dir: Path, *flags, max_tokens=2048) -> Path:
    checkpoint = save_dir / "checkpoint_last.pt"
    run(
        "fairseq-train", data, "--user-dir", "phm_fairseq", "--save-dir", save_dir, "--task", "translation",
        "--share-all-embeddings", "--optimizer", "adam", "--lr", "0.005", "--lr-scheduler", "inverse_sqrt",
        "--warmup-updates", "50", "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", max_tokens, "--dropout", "0.0", "--seed", "1", "--no-epoch-checkpoints", *flags,
        done=checkpoint.exists(),
    )  # fmt: skip
    return checkpoint


def first_test_sentences(data: Path, count: int, out: Path) -> Path:
    """A data directory whose test split is the first ``count`` test sentences of ``data``'s (same dictionaries)."""
    import shutil

    from fairseq.data import Dictionary, indexed_dataset

    out.mkdir(parents=True, exist_ok=True)
    prep = json.loads((data / "prep.json").read_text())
    src, tgt = prep["source_lang"], prep["target_lang"]
    for name in (f"dict.{src}.txt", f"dict.{tgt}.txt", "bpe.codes", "prep.json"):
        shutil.copy(data / name, out / name)
    (out / "raw").mkdir(exist_ok=True)
    for lang in (src, tgt):
        lines = (data / "raw" / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:count]
        (out / "raw" / f"test.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        prefix = f"test.{src}-{tgt}.{lang}"
        dataset = indexed_dataset.make_dataset(str(data / prefix), impl="mmap")
        vocab = len(Dictionary.load(str(data / f"dict.{lang}.txt")))
        builder = indexed_dataset.make_builder(str(out / f"{prefix}.bin"), impl="mmap", vocab_size=vocab)
        for i in range(count):
            builder.add_item(dataset[i])
        builder.finalize(str(out / f"{prefix}.idx"))
    return out


def fairseq_generate(run: Commands, data: Path, checkpoint: Path, batch: int, plugin: bool, length=None):
    """(detokenized hypotheses in test order, sentences/s by fairseq-generate's own timer)."""
    prep = json.loads((data / "prep.json").read_text())
    argv = ["fairseq-generate", data, "--path", checkpoint, "--gen-subset", "test", "--beam", "5", "--lenpen", "0.6"]
    argv += ["--batch-size", batch, "--required-batch-size-multiple", "1", *prep["generate_args"].split()]
    argv += ["--user-dir", "phm_fairseq"] if plugin else []
    argv += ["--min-len", length, "--max-len-a", "0", "--max-len-b", length] if length else []
    out = run(*argv, record=False)
    speed = re.search(r"Translated [\d,]+ sentences \([\d,]+ tokens\) in [\d.]+s \(([\d.]+) sentences/s", out.stderr)
    detokenized = dict(re.findall(r"^D-(\d+)\t\S+\t(.*)$", out.stdout, flags=re.M))
    command = shlex.join(map(shown, argv))
    return [detokenized[str(i)] for i in range(len(detokenized))], float(speed.group(1)), command


class CTranslate2:
    """The pipeline of docs/translation.md: sacremoses and subword-nmt as fairseq's moses tokenizer and
    subword_nmt BPE apply them, CTranslate2's beam search, BPE removal and detokenization."""

    def __init__(self, model_dir: Path, data: Path, threads: int):
        import ctranslate2
        from sacremoses import MosesDetokenizer, MosesTokenizer
        from subword_nmt.apply_bpe import BPE

        prep = json.loads((data / "prep.json").read_text())
        self.tokenizer, self.detokenizer = MosesTokenizer(prep["source_lang"]), MosesDetokenizer(prep["target_lang"])
        with open(data / "bpe.codes", encoding="utf-8") as codes:
            self.bpe = BPE(codes)
        self.translator = ctranslate2.Translator(str(model_dir), device="cpu", intra_threads=threads, inter_threads=1)

    def encode(self, sentence: str) -> list:
        tokenized = self.tokenizer.tokenize(sentence, aggressive_dash_splits=True, return_str=True, escape=True)
        return self.bpe.process_line(tokenized).split()

    def decode(self, tokens: list) -> str:
        return self.detokenizer.detokenize((" ".join(tokens) + " ").replace("@@ ", "").split())

    def translate(self, sentences: list, batch: int, length=None):
        """(translations, sentences/s of translate_batch)."""
        options = {"beam_size": 5, "length_penalty": 0.6, "max_batch_size": batch}
        if length:
            options.update(min_decoding_length=length, max_decoding_length=length)
        tokens = [self.encode(sentence) for sentence in sentences]
        self.translator.translate_batch(tokens[:batch], **options)  # warm-up
        start = time.perf_counter()
        results = []
        for i in range(0, len(tokens), batch):  # one call a batch, as fairseq-generate's batches
            results += self.translator.translate_batch(tokens[i : i + batch], **options)
        seconds = time.perf_counter() - start
        return [self.decode(r.hypotheses[0]) for r in results], len(sentences) / seconds


def disk_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def phm_weights_bytes(checkpoint: Path) -> int:
    import phm_fairseq  # noqa: F401  (safe loading of the plugin's checkpoints)

    buffer = io.BytesIO()
    torch.save(torch.load(checkpoint, map_location="cpu", weights_only=True)["model"], buffer)
    return buffer.tell()


def measure(size, run, checkpoint, data, work, threads, rounds, length=None) -> list:
    """The rows of one model: every engine in every mode."""
    import sacrebleu

    dense, ct2 = work / f"{size}_dense.pt", {q: work / f"{size}_ct2_{q}" for q in ("float32", "int8")}
    run("phm-export", checkpoint, "--out", dense, done=dense.exists())
    for quantization, out in ct2.items():
        run("phm-export", checkpoint, "--format", "ctranslate2", "--quantization", quantization, "--out", out,
            done=out.exists())  # fmt: skip
    sizes = {"fairseq PHM": phm_weights_bytes(checkpoint), "fairseq exported": disk_bytes(dense)}
    sizes.update({f"CTranslate2 {q}": disk_bytes(out) for q, out in ct2.items()})
    translators = {f"CTranslate2 {q}": CTranslate2(out, data, threads) for q, out in ct2.items()}
    sentences = (data / "raw" / "test.en").read_text(encoding="utf-8").splitlines()
    references = (data / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    rows, commands = [], {}
    for mode, batch in MODES.items():
        speeds, outputs = {engine: [] for engine in ENGINES}, {}
        for _ in range(rounds):  # the engines alternate within each round
            for engine in ENGINES:
                if engine.startswith("fairseq"):
                    target = checkpoint if engine == "fairseq PHM" else dense
                    hyps, sps, command = fairseq_generate(run, data, target, batch, engine == "fairseq PHM", length)
                    commands[f"{engine}, {mode}"] = command
                else:
                    hyps, sps = translators[engine].translate(sentences, batch, length)
                outputs[engine] = hyps
                speeds[engine].append(sps)
        for engine in ENGINES:
            rows.append(
                {
                    "size": size,
                    "engine": engine,
                    "mode": mode,
                    "bleu": None if length else sacrebleu.corpus_bleu(outputs[engine], [references]).score,
                    "sentences_per_s": statistics.median(speeds[engine]),
                    "mb_on_disk": sizes[engine] / 1e6,
                    "differing_from_phm": sum(a != b for a, b in zip(outputs[engine], outputs["fairseq PHM"])),
                    "sentences": len(sentences),
                }
            )
        base = rows[-len(ENGINES)]["sentences_per_s"]
        for row in rows[-len(ENGINES) :]:
            row["vs_phm"] = row["sentences_per_s"] / base
            bleu = "-" if row["bleu"] is None else f"{row['bleu']:.2f}"
            print(
                f"{size:<5} {mode:<14} {row['engine']:<20} BLEU {bleu}"
                f"  {row['sentences_per_s']:8.1f} sent/s ({row['vs_phm']:.2f}x)  {row['mb_on_disk']:.2f} MB"
                f"  {row['differing_from_phm']} lines differ",
                flush=True,
            )
    run.log.extend(commands.values())
    return rows


def quality(run, checkpoints: list, data: Path, work: Path, threads: int) -> list:
    """BLEU of every checkpoint by fairseq-generate and CTranslate2 float32 and int8 (batched, one run each)."""
    import sacrebleu

    sentences = (data / "raw" / "test.en").read_text(encoding="utf-8").splitlines()
    references = (data / "raw" / "test.de").read_text(encoding="utf-8").splitlines()
    rows = []
    for checkpoint in checkpoints:
        model = f"{checkpoint.parents[2].name}/{checkpoint.parents[1].name}/{checkpoint.stem}"  # <config>/seed<S>/…
        outputs, sizes = {}, {"fairseq": phm_weights_bytes(checkpoint)}
        outputs["fairseq"], _, command = fairseq_generate(run, data, checkpoint, 128, plugin=True)
        run.log.append(command)
        for quantization in ("float32", "int8"):
            out = work / "quality" / f"{model.replace('/', '_')}_ct2_{quantization}"
            run("phm-export", checkpoint, "--format", "ctranslate2", "--quantization", quantization, "--out", out,
                done=out.exists())  # fmt: skip
            engine = f"CTranslate2 {quantization}"
            outputs[engine], _ = CTranslate2(out, data, threads).translate(sentences, 128)
            sizes[engine] = disk_bytes(out)
        fairseq_bleu = sacrebleu.corpus_bleu(outputs["fairseq"], [references]).score
        for engine, hypotheses in outputs.items():
            bleu = sacrebleu.corpus_bleu(hypotheses, [references]).score
            rows.append(
                {
                    "model": model,
                    "engine": engine,
                    "bleu": round(bleu, 2),
                    "vs_fairseq": round(bleu - fairseq_bleu, 2),
                    "mb_on_disk": sizes[engine] / 1e6,
                    "differing_from_fairseq": sum(a != b for a, b in zip(hypotheses, outputs["fairseq"])),
                    # the target is a loss: an int8 model that scores higher does not miss it
                    "meets_target": bleu >= fairseq_bleu - TARGET_BLEU_GAP if "int8" in engine else "",
                }
            )
            print(f"{model:<24} {engine:<20} BLEU {bleu:.2f} ({bleu - fairseq_bleu:+.2f})", flush=True)
    return rows


def report_quality(run, checkpoints: list, data: Path, work: Path, threads: int) -> Path:
    rows = quality(run, checkpoints, data, work, threads)
    columns = [
        ("model", "model"),
        ("engine", "engine"),
        ("bleu", "BLEU"),
        ("vs_fairseq", "vs fairseq"),
        ("mb_on_disk", "MB on disk"),
        ("differing_from_fairseq", "lines differing from fairseq"),
        ("meets_target", f"int8 loses at most {TARGET_BLEU_GAP} BLEU"),
    ]
    notes = " ".join(
        [
            f"{len(checkpoints)} checkpoints on {shown(data)}'s 1,000 test sentences; BLEU by sacrebleu on the",
            "detokenized output against raw/test.de. Beam 5, length penalty 0.6, 128 sentences a batch.",
            "fairseq: fairseq-generate on the checkpoint (with the plugin for a PHM model); CTranslate2: its",
            "phm-export --format ctranslate2, as docs/translation.md deploys it. No speed here: see export_cpu.md.",
        ]
    )
    notes += "\n\nCommands (from the repository root):\n\n" + "\n".join(f"    {c}" for c in run.log)
    title = "What CTranslate2's int8 costs trained models: BLEU of fairseq and CTranslate2 (cpu)"
    return write_report("export_quality_cpu", title, environment("cpu"), columns, rows, notes)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, help=f"the demo model (default: {DEMO_CONFIG}'s, by phm-run)")
    parser.add_argument("--data", type=Path, default=REPO / "data-bin" / "multi30k.en-de", help="its data directory")
    parser.add_argument("--base-sentences", type=int, default=200, help="test sentences for the base size")
    parser.add_argument("--length", type=int, default=20, help="forced output length at the base size")
    parser.add_argument("--rounds", type=int, default=3, help="runs of every engine and mode (medians)")
    parser.add_argument("--work", type=Path, default=REPO / "work" / "bench_export", help="models and exports")
    parser.add_argument("--quick", action="store_true", help="a tiny model trained here, 20 base sentences, 1 round")
    parser.add_argument("--quality", type=Path, nargs="+", metavar="CHECKPOINT", help="BLEU only, of these models")
    args = parser.parse_args()
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    run = Commands(threads)
    if args.quality:
        missing = [str(c) for c in args.quality if not c.is_file()]
        if missing:
            parser.error(f"no such checkpoint: {', '.join(missing)}")
        prepare_multi30k(str(args.data))
        print(f"wrote {report_quality(run, args.quality, args.data, args.work, threads)} (+ .json)")
        return
    if args.quick:
        args.work = REPO / "work" / "bench_export_quick"
        args.base_sentences, args.rounds = 20, 1
        data = quick_corpus(args.work, run)
        checkpoint = train(run, data, args.work / "tiny_phm", "--arch", "phm_transformer_demo", "--phm-n", "4",
                           *TINY.split(), "--max-update", "300")  # fmt: skip
    else:
        data = args.data
        prepare_multi30k(str(data))
        checkpoint = args.checkpoint
        if checkpoint is None:
            run("phm-run", DEMO_CONFIG)  # skipped when done
            checkpoint = DEMO_CHECKPOINT
    args.work.mkdir(parents=True, exist_ok=True)
    rows = measure("demo", run, checkpoint, data, args.work, threads, args.rounds)
    base = train(run, data, args.work / "base_phm", "--arch", "phm_transformer_base", "--phm-n", "4",
                 "--max-update", "1", max_tokens=1024)  # fmt: skip
    subset = first_test_sentences(data, args.base_sentences, args.work / f"test{args.base_sentences}")
    rows += measure("base", run, base, subset, args.work, threads, args.rounds, length=args.length)

    demo = {(r["engine"], r["mode"]): r for r in rows if r["size"] == "demo"}
    for (engine, mode), row in demo.items():
        if engine == "CTranslate2 int8":
            row["meets_target"] = abs(row["bleu"] - demo["fairseq PHM", mode]["bleu"]) <= TARGET_BLEU_GAP
    columns = [
        ("size", "model"),
        ("engine", "engine"),
        ("mode", "decoding"),
        ("bleu", "BLEU"),
        ("sentences_per_s", "sentences/s"),
        ("vs_phm", "vs fairseq PHM"),
        ("mb_on_disk", "MB on disk"),
        ("differing_from_phm", "lines differing from fairseq PHM"),
        ("meets_target", "int8 within 0.3 BLEU"),
    ]
    for row in rows:
        row.setdefault("meets_target", "")
        row["bleu"] = "" if row["bleu"] is None else round(row["bleu"], 2)
    notes = " ".join(
        [
            f"demo: {shown(checkpoint)} on {shown(data)} ({rows[0]['sentences']} test sentences),",
            "BLEU by sacrebleu on the detokenized output against raw/test.de;",
            f"base: {shown(base)} (PHM n=4 after one update: speed only) on the first {args.base_sentences}",
            f"test sentences, every output forced to {args.length} tokens. Beam 5, length penalty 0.6;",
            f"one at a time: batch 1, batched: 128 sentences a batch; {threads} threads (OMP_NUM_THREADS,",
            "CTranslate2 intra_threads). fairseq-generate's own timer (generation only); the PHM checkpoint",
            "with the default product rule (factored_crossover). CTranslate2: translate_batch timed,",
            "tokenization and BPE outside, as in fairseq-generate:",
            f"ctranslate2.Translator(DIR, intra_threads={threads}, inter_threads=1).translate_batch(tokens,",
            "beam_size=5, length_penalty=0.6, max_batch_size=B)",
            f"(base: min_decoding_length = max_decoding_length = {args.length}).",
            f"Medians of {args.rounds} rounds alternating the engines. MB on disk: the PHM model's weights",
            "(its checkpoint without optimizer state), the exported checkpoint, the CTranslate2 folder.",
        ]
    )
    notes += "\n\nCommands (from the repository root):\n\n" + "\n".join(f"    {c}" for c in run.log)
    title = "A PHM-Transformer without the plugin: fairseq-generate, phm-export, CTranslate2 (cpu)"
    name = "export_cpu_quick" if args.quick else "export_cpu"
    env = environment("cpu")
    path = write_report(name, title, env, columns, rows, notes, directory=args.work if args.quick else RESULTS)
    print(f"wrote {path} (+ .json)")


if __name__ == "__main__":
    main()
