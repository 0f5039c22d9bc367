#!/usr/bin/env python3
"""Subject-verb agreement as number prediction (Linzen, Dupoux & Goldberg, 2016): a TSV of
dependencies -> train/valid/test examples "sentence prefix up to the verb" + "singular/plural".

    sva_splits.py agr_50_mostcommon_10K.tsv.gz OUTDIR                  # 9% / 1% / 90%
    sva_splits.py wiki-dev.txt OUTDIR --proportions 70,10             # a small sample: 70/10/20
    sva_splits.py --labels                                            # the label set, in its order

Two layouts are read, told apart by their header:
  - Linzen et al.'s release (agr_50_mostcommon_10K.tsv): columns sentence, orig_sentence,
    verb, verb_pos, verb_index (counted from 1), n_intervening, n_diff_intervening, ...;
  - the same data with fewer columns (sentence, subj_idx, verb_idx counted from 0, verb_pos,
    verb, inflected_verb), as in the sample of the workplace (../shared/data/sva).
In both, ``sentence`` has the words outside the 10k most common replaced by their POS tag.
A row is one line (lines end at "\n" only, the last one with or without it, as textlines.py
reads them), its fields are split at tabs, and line numbers in messages are the file's physical
lines, header included. The release was written by Python's csv.writer, which puts a field
that holds '"' in quotes and doubles the quotes inside ("a ""b"" c"): such a field is read
back as csv.reader would; any other field, one that merely starts with '"' included, is taken
as it is (csv.reader would run such a field on over the next lines).

The input is ``sentence`` up to, not including, the verb; the label is the verb's number:
VBZ singular, VBP plural. Any other verb_pos, a row of the wrong width, an index that is not a
position of the sentence or that does not point at the row's verb stops the run with the line
number. Rows are only left out by a stated rule, counted and printed: Linzen et al.'s limit of
50 tokens per sentence and, with --t2t-test, the test rows that tensor2tensor's
sva_number_prediction leaves out. Part of data-prep: uses no phm_fairseq code.

Splits: the rows are shuffled with Python's random.Random(SEED) (seed 1), then the first
TRAIN% are train, the next VALID% valid and the rest test. The default 9 / 1 / 90 is Linzen
et al.'s (10% for training, of which Keras held out the last tenth for validation, 90% test),
and tensor2tensor's sva_number_prediction's.
"""

import argparse
import json
import random
import sys
from fractions import Fraction

from textlines import TextError, lines

LABELS = {"VBZ": "singular", "VBP": "plural"}
SPLITS = ("train", "valid", "test")
MAX_TOKENS = 50  # Linzen et al.'s maxlen
PROGRESS_EVERY = 100_000

# layout: the column of the verb's position, the position of the first word, the column whose
# words the verb column is checked against (the release also keeps the words that `sentence`
# replaced by a POS tag)
LAYOUTS = {
    "linzen": dict(index="verb_index", first=1, words="orig_sentence"),
    "indexed-from-0": dict(index="verb_idx", first=0, words="sentence"),
}
T2T_COLUMNS = ("n_intervening", "n_diff_intervening")
SKIP_RULES = {
    "long": f"sentences over {MAX_TOKENS} tokens (Linzen et al.'s limit)",
    "t2t": "test rows with an intervening noun of the subject's number (--t2t-test)",
}


class CorpusError(Exception):
    pass


def fields(line):
    """The tab-separated fields of a line, a field that csv.writer quoted unquoted."""
    return [unquote(text) for text in line.split("\t")]


def unquote(text):
    if len(text) >= 2 and text[0] == text[-1] == '"' and '"' not in text[1:-1].replace('""', ""):
        return text[1:-1].replace('""', '"')
    return text


def read_header(header, t2t_test):
    layout = next((name for name, spec in LAYOUTS.items() if spec["index"] in header), None)
    if layout is None:
        raise CorpusError(
            "line 1: the header names neither verb_index (Linzen et al.'s release) nor verb_idx "
            f"(the same data indexed from 0); found: {', '.join(header)}"
        )
    spec = LAYOUTS[layout]
    needed = ["sentence", "verb", "verb_pos", spec["index"], spec["words"]] + (list(T2T_COLUMNS) if t2t_test else [])
    missing = [name for name in dict.fromkeys(needed) if name not in header]
    if missing:
        hint = " (--t2t-test needs Linzen et al.'s release)" if t2t_test and set(missing) & set(T2T_COLUMNS) else ""
        raise CorpusError(f"line 1: the header lacks the column(s) {', '.join(missing)}{hint}")
    return layout, {name: header.index(name) for name in needed}


def example(row, columns, spec, where):
    """(prefix, label, row's dependency fields) of one row; CorpusError if it is malformed."""
    tokens = row[columns["sentence"]].split()
    words = row[columns[spec["words"]]].split()
    verb, pos, index = row[columns["verb"]], row[columns["verb_pos"]], row[columns[spec["index"]]]
    if pos not in LABELS:
        raise CorpusError(f"{where}: verb_pos {pos!r} is neither VBZ (singular) nor VBP (plural)")
    if not index.strip().isdigit():
        raise CorpusError(f"{where}: {spec['index']} {index!r} is not a word position")
    position = int(index) - spec["first"]
    if not 0 <= position < len(tokens):
        raise CorpusError(f"{where}: {spec['index']} {index} is outside the sentence of {len(tokens)} tokens")
    if len(words) != len(tokens):
        raise CorpusError(f"{where}: {spec['words']} has {len(words)} tokens but sentence has {len(tokens)}")
    # the verb itself, or its POS tag where the word was replaced as infrequent
    if words[position].lower() != verb.lower() and words[position] != pos:
        raise CorpusError(
            f"{where}: {spec['index']} {index} points at {words[position]!r}, not at the verb {verb!r} "
            f"(positions count from {spec['first']} in this layout)"
        )
    if position == 0:
        raise CorpusError(f"{where}: the verb {verb!r} is the first word: there is no prefix to classify")
    return " ".join(tokens[:position]), LABELS[pos], len(tokens)


def read_examples(path, t2t_test):
    """Every row as (prefix, label, keep_in_t2t_test), in file order, and the rule-based skips."""
    skipped = {rule: 0 for rule in SKIP_RULES if rule != "t2t" or t2t_test}
    examples = []
    rows = lines(path)
    _, line = next(rows, (0, None))
    if line is None:
        raise CorpusError("the file is empty")
    header = fields(line)
    layout, columns = read_header(header, t2t_test)
    spec = LAYOUTS[layout]
    for number, line in rows:
        where = f"line {number}"
        if not line:
            raise CorpusError(f"{where}: an empty line")
        row = fields(line)
        if len(row) != len(header):
            raise CorpusError(f"{where}: expected {len(header)} tab-separated fields, found {len(row)}")
        prefix, label, length = example(row, columns, spec, where)
        if length > MAX_TOKENS:
            skipped["long"] += 1
            continue
        kept_by_t2t = not t2t_test or row[columns["n_intervening"]] == row[columns["n_diff_intervening"]]
        examples.append((prefix, label, kept_by_t2t))
        if len(examples) % PROGRESS_EVERY == 0:
            print(f"    {len(examples):,} examples read", file=sys.stderr, flush=True)
    if not examples and not skipped["long"]:
        raise CorpusError("the file has its header line only: no rows")
    return layout, examples, skipped


def split(examples, proportions, seed):
    """Shuffled, then cut into train / valid / test at the given percentages."""
    order = list(examples)
    random.Random(seed).shuffle(order)
    n_train, n_valid = (int(len(order) * share / 100) for share in proportions)
    parts = dict(zip(SPLITS, (order[:n_train], order[n_train : n_train + n_valid], order[n_train + n_valid :])))
    for name, part in parts.items():
        if not part:
            raise CorpusError(
                f"the {name} split would be empty: {len(order)} examples at --proportions "
                f"{','.join(map(str, proportions))}; a small file needs larger shares (e.g. --proportions 70,10)"
            )
    return parts


def convert(path, out_dir, proportions, seed, t2t_test):
    layout, examples, skipped = read_examples(path, t2t_test)
    parts = split(examples, proportions, seed)
    if t2t_test:
        skipped["t2t"] = sum(not kept for *_, kept in parts["test"])
        parts["test"] = [e for e in parts["test"] if e[2]]
        if not parts["test"]:
            raise CorpusError(
                f"--t2t-test leaves none of the {skipped['t2t']} test rows: the test split would be empty"
            )
    summary = {
        "input": path,
        "layout": layout,
        "rows": len(examples) + skipped["long"],
        "proportions": [float(p) for p in proportions],
        "seed": seed,
        "t2t_test": t2t_test,
        "skipped_by_rule": {SKIP_RULES[rule]: count for rule, count in skipped.items()},
        "splits": {},
    }
    for name, part in parts.items():
        with (
            open(f"{out_dir}/{name}.input", "w", encoding="utf-8") as inputs,
            open(f"{out_dir}/{name}.label", "w", encoding="utf-8") as labels,
        ):
            for prefix, label, _ in part:
                inputs.write(prefix + "\n")
                labels.write(label + "\n")
        counts = {label: sum(e[1] == label for e in part) for label in LABELS.values()}
        summary["splits"][name] = {"examples": len(part), **counts}
    with open(f"{out_dir}/summary.json", "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=2)
    sizes = ", ".join(
        f"{name} {s['examples']:,} ({s['singular']:,} singular, {s['plural']:,} plural)"
        for name, s in summary["splits"].items()
    )
    rules = "; ".join(f"{count:,} {rule}" for rule, count in summary["skipped_by_rule"].items())
    print(f"{path}: {summary['rows']:,} rows ({layout} layout) -> {sizes}; skipped by rule: {rules}", file=sys.stderr)


def percentages(text):
    try:
        shares = [Fraction(part) for part in text.split(",")]
    except ValueError:
        shares = []
    if len(shares) != 2 or min(shares) <= 0 or sum(shares) >= 100:
        raise argparse.ArgumentTypeError(f"expected TRAIN,VALID percentages that leave some for test, not {text!r}")
    return shares


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", help="the TSV (plain or .gz)")
    parser.add_argument("out_dir", nargs="?", help="where SPLIT.input, SPLIT.label and summary.json go")
    parser.add_argument(
        "--proportions",
        type=percentages,
        default="9,1",
        metavar="TRAIN,VALID",
        help="percent of the examples for train and valid; the rest is test (default: 9,1)",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the shuffle (default: 1)")
    parser.add_argument(
        "--t2t-test",
        action="store_true",
        help="keep only the test rows whose intervening nouns all differ in number from the subject "
        "(n_intervening = n_diff_intervening), as tensor2tensor's sva_number_prediction does",
    )
    parser.add_argument("--labels", action="store_true", help="print the label set, one a line, in its fixed order")
    args = parser.parse_args()
    if args.labels:
        print("\n".join(LABELS.values()))
        return
    if not (args.input and args.out_dir):
        parser.error("give an input file and an output folder")
    try:
        convert(args.input, args.out_dir, args.proportions, args.seed, args.t2t_test)
    except CorpusError as error:
        sys.exit(f"error: {args.input}: {error}")
    except TextError as error:
        sys.exit(f"error: {error}")
    except FileNotFoundError as error:
        sys.exit(f"error: {error.filename}: no such file")


if __name__ == "__main__":
    main()
