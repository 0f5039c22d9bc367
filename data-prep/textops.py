"""The few text operations of the data-prep scripts that no command-line tool offers.

    textops.py read FILE [--name NAME]        (FILE, plain or .gz, as textlines.py reads it -> stdout)
    textops.py clean SRC TGT OUT_SRC OUT_TGT --max-len N [--ratio R]
    textops.py unzip FILE [DEST]              (check the archive; extract it into DEST)
    textops.py lower                          (stdin -> stdout)
    textops.py spaces                         (stdin -> stdout: U+2028, U+0085, ... as spaces)
    textops.py spm-train MODEL_PREFIX VOCAB_SIZE FILE...
    textops.py spm-encode MODEL               (stdin -> stdout)

Plain standard library, except sentencepiece for the spm commands: the pip wheel of
sentencepiece ships no spm_train/spm_encode executables, only this Python API. Files and
standard input are split into lines at "\n" only (see textlines.py).
"""

import argparse
import sys
import zipfile

import textlines


def read(args):
    """The one entry of text into data-prep: every later step sees "\n"-terminated UTF-8 lines."""
    out = sys.stdout
    try:
        for _, text in textlines.lines(args.file, args.name):
            out.write(text + "\n")
    except textlines.TextError as error:
        sys.exit(f"error: {error}")


def clean(args):
    """Drop training pairs with an empty side, a side over --max-len tokens or, with --ratio,
    a token-length ratio above it: the rules of Moses' clean-corpus-n.perl (min length 1)."""
    kept = dropped = 0
    with (
        open(args.src, encoding="utf-8", newline="\n") as src,
        open(args.tgt, encoding="utf-8", newline="\n") as tgt,
        open(args.out_src, "w", encoding="utf-8") as out_src,
        open(args.out_tgt, "w", encoding="utf-8") as out_tgt,
    ):
        for s, t in zip(src, tgt, strict=True):
            ns, nt = len(s.split()), len(t.split())
            if min(ns, nt) == 0 or max(ns, nt) > args.max_len or (args.ratio and max(ns / nt, nt / ns) > args.ratio):
                dropped += 1
                continue
            out_src.write(s)
            out_tgt.write(t)
            kept += 1
    print(
        f"    kept {kept} pairs, dropped {dropped} (empty side, > {args.max_len} tokens"
        + (f" or length ratio > {args.ratio}" if args.ratio else "")
        + ")"
    )


def unzip(args):
    """Check every member's CRC, then extract (python -m zipfile -t reports corrupt members
    but still exits 0)."""
    try:
        with zipfile.ZipFile(args.file) as archive:
            bad = archive.testzip()
            if bad:
                sys.exit(f"corrupt member {bad}")
            if args.dest:
                archive.extractall(args.dest)
    except (zipfile.BadZipFile, OSError, EOFError) as error:
        sys.exit(str(error))


def lower(_args):
    for line in sys.stdin:
        sys.stdout.write(line.lower())


def spaces(_args):
    for line in sys.stdin:
        sys.stdout.write(textlines.spaces(line))


def spm_train(args):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=",".join(args.files),
        model_prefix=args.model_prefix,
        vocab_size=args.vocab_size,
        model_type="bpe",
        character_coverage=1.0,
        # a soft limit: a small corpus (a test slice) that cannot fill the vocabulary still trains
        hard_vocab_limit=False,
        input_sentence_size=10_000_000,
        shuffle_input_sentence=True,
        minloglevel=1,
    )


def spm_encode(args):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=args.model)
    for line in sys.stdin:
        sys.stdout.write(" ".join(sp.encode(line.rstrip("\n"), out_type=str)) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("read")
    p.add_argument("file")
    p.add_argument("--name", help="the file as messages call it (e.g. ARCHIVE:MEMBER)")
    p.set_defaults(func=read)
    p = sub.add_parser("clean")
    for name in ("src", "tgt", "out_src", "out_tgt"):
        p.add_argument(name)
    p.add_argument("--max-len", type=int, required=True)
    p.add_argument("--ratio", type=float)
    p.set_defaults(func=clean)
    p = sub.add_parser("unzip")
    p.add_argument("file")
    p.add_argument("dest", nargs="?")
    p.set_defaults(func=unzip)
    sub.add_parser("lower").set_defaults(func=lower)
    sub.add_parser("spaces").set_defaults(func=spaces)
    p = sub.add_parser("spm-train")
    p.add_argument("model_prefix")
    p.add_argument("vocab_size", type=int)
    p.add_argument("files", nargs="+")
    p.set_defaults(func=spm_train)
    p = sub.add_parser("spm-encode")
    p.add_argument("model")
    p.set_defaults(func=spm_encode)
    args = parser.parse_args()
    sys.stdin.reconfigure(newline="\n")  # "\r", U+2028 and the like stay inside their line
    args.func(args)


if __name__ == "__main__":
    main()
