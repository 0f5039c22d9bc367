#!/usr/bin/env python3
"""One NLI corpus file in its release format -> TSV lines "label<TAB>premise<TAB>hypothesis".

    nli_to_tsv.py --format snli-jsonl snli_1.0_train.jsonl train.tsv
    nli_to_tsv.py --format sick SICK_train.txt train.tsv --hold-out 500:valid.tsv
    nli_to_tsv.py --labels snli-jsonl          # the label set of a format, in its fixed order

Sentences come out tokenized (space-separated): from the corpus's own parse where it has one
(SNLI, MultiNLI), as released where the release is tokenized (the Quora split of Wang et al.,
the tokenized SNLI TSV), else by sacremoses' English Moses tokenizer. Labels are mapped to the
corpus's label set; an unknown label, a malformed line or invalid JSON stops the run with the
file and line number. Examples are only left out by a stated rule (SNLI/MultiNLI gold label
'-': no annotator majority; an empty sentence), and every one is counted and printed; a file
that gives no example (empty, a header only, or every example left out) is an error.
Lines are read the way textlines.py reads them: they end at "\n" only, the last one with or
without it, and line numbers in messages are the file's physical lines, header included.
TSV fields are split at tabs, without any quoting: a field may start with '"'.
Part of data-prep: uses no phm_fairseq code.
"""

import argparse
import json
import random
import sys

from textlines import TextError
from textlines import lines as read_lines

NLI3 = ("entailment", "neutral", "contradiction")


class CorpusError(Exception):
    pass


def parse_tokens(binary_parse):
    """Tokens of a Penn-Treebank-style binary parse: "( ( Two women ) ( are ... ) )"."""
    return " ".join(t for t in binary_parse.split() if t not in ("(", ")"))


def moses():
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang="en")
    return lambda text: tokenizer.tokenize(text, escape=False, return_str=True)


def jsonl_records(lines):
    for number, line in lines:
        if not line.strip():
            continue
        try:
            yield f"line {number}", json.loads(line)
        except json.JSONDecodeError as error:
            raise CorpusError(f"line {number}: not valid JSON ({error.msg})") from None


def json_array_records(lines):
    text = "\n".join(line for _, line in lines)
    try:
        records = json.loads(text)
    except json.JSONDecodeError as error:
        raise CorpusError(f"line {error.lineno}: not valid JSON ({error.msg})") from None
    if not isinstance(records, list):
        raise CorpusError("line 1: expected a JSON array of examples")
    # one-line arrays (as Dialogue NLI is released) have no useful line numbers: number the examples
    for index, record in enumerate(records, start=1):
        yield f"example {index}", record


def tsv_records(lines, fields, header=None):
    """Rows as dicts; with ``header`` the first line must name the columns (any order)."""
    columns = None
    for number, line in lines:
        row = line.split("\t")
        if header is not None and columns is None:
            missing = [name for name in header if name not in row]
            if missing:
                raise CorpusError(
                    f"line {number}: header lacks the column(s) {', '.join(missing)} (found: {', '.join(row)})"
                )
            columns = {name: row.index(name) for name in header}
            width = len(row)
            continue
        if not line.strip():
            continue
        expected = width if header is not None else len(fields)
        if len(row) != expected:
            raise CorpusError(f"line {number}: expected {expected} tab-separated fields, found {len(row)}")
        if header is not None:
            yield f"line {number}", {name: row[i] for name, i in columns.items()}
        else:
            yield f"line {number}", dict(zip(fields, row))


def field(record, name, where):
    if not isinstance(record, dict) or name not in record:
        raise CorpusError(f"{where}: no field {name!r}")
    return record[name]


# format: (label set, label map, rule-skipped labels, how to read, premise, hypothesis, tokenizer)
FORMATS = {
    # SNLI / MultiNLI release (.jsonl): tokens from the binary parses
    "snli-jsonl": dict(
        labels=NLI3,
        label_map={label: label for label in NLI3},
        skip={"-": "no gold label ('-': no annotator majority)"},
        read=jsonl_records,
        label="gold_label",
        premise="sentence1_binary_parse",
        hypothesis="sentence2_binary_parse",
        clean=parse_tokens,
    ),
    # tokenized SNLI TSV with a header (gold_label, sentence1, sentence2), as in e-SNLI
    "snli-tok-tsv": dict(
        labels=NLI3,
        label_map={label: label for label in NLI3},
        skip={"-": "no gold label ('-': no annotator majority)"},
        read=lambda lines: tsv_records(lines, None, header=("gold_label", "sentence1", "sentence2")),
        header=True,
        label="gold_label",
        premise="sentence1",
        hypothesis="sentence2",
        clean=None,
    ),
    # SICK (SemEval 2014 task 1): header pair_ID, sentence_A, sentence_B, relatedness_score, entailment_judgment
    "sick": dict(
        labels=NLI3,
        label_map={label.upper(): label for label in NLI3},
        skip={},
        read=lambda lines: tsv_records(lines, None, header=("sentence_A", "sentence_B", "entailment_judgment")),
        header=True,
        label="entailment_judgment",
        premise="sentence_A",
        hypothesis="sentence_B",
        clean="moses",
    ),
    # SciTail tsv_format: premise, hypothesis, label (entails / neutral), no header
    "scitail-tsv": dict(
        labels=("entailment", "neutral"),
        label_map={"entails": "entailment", "neutral": "neutral"},
        skip={},
        read=lambda lines: tsv_records(lines, ("premise", "hypothesis", "label")),
        label="label",
        premise="premise",
        hypothesis="hypothesis",
        clean="moses",
    ),
    # Dialogue NLI: a JSON array; positive / neutral / negative = entailment / neutral / contradiction
    "dnli-json": dict(
        labels=NLI3,
        label_map={"positive": "entailment", "neutral": "neutral", "negative": "contradiction"},
        skip={},
        read=json_array_records,
        label="label",
        premise="sentence1",
        hypothesis="sentence2",
        clean="moses",
    ),
    # Quora question pairs, the split of Wang et al. (2017): label, question 1, question 2, id; tokenized
    "quora-tsv": dict(
        labels=("not_paraphrase", "paraphrase"),
        label_map={"0": "not_paraphrase", "1": "paraphrase"},
        skip={},
        read=lambda lines: tsv_records(lines, ("label", "premise", "hypothesis", "id")),
        label="label",
        premise="premise",
        hypothesis="hypothesis",
        clean=None,
    ),
}


def convert(fmt, path, out, hold_out=0, hold_out_out=None, seed=1, summary=None):
    spec = FORMATS[fmt]
    clean = moses() if spec["clean"] == "moses" else spec["clean"] or (lambda s: s)
    skipped = {reason: 0 for reason in spec["skip"].values()}
    skipped["empty premise or hypothesis"] = 0
    examples = []
    text_lines = 0

    def counted():  # the file's lines; those with text are counted for the message on an empty split
        nonlocal text_lines
        for number, line in read_lines(path):
            text_lines += bool(line.strip())
            yield number, line

    for where, record in spec["read"](counted()):
        raw = str(field(record, spec["label"], where)).strip()
        if raw in spec["skip"]:
            skipped[spec["skip"][raw]] += 1
            continue
        if raw not in spec["label_map"]:
            known = ", ".join(repr(k) for k in spec["label_map"])
            rule = f"; skipped by rule: {', '.join(map(repr, spec['skip']))}" if spec["skip"] else ""
            raise CorpusError(f"{where}: unknown label {raw!r} (known: {known}{rule})")
        premise, hypothesis = (
            " ".join(clean(str(field(record, spec[k], where))).split()) for k in ("premise", "hypothesis")
        )
        if not premise or not hypothesis:
            skipped["empty premise or hypothesis"] += 1
            continue
        examples.append(f"{spec['label_map'][raw]}\t{premise}\t{hypothesis}\n")
    if not examples:
        if text_lines == 0:
            what = "the file is empty"
        elif text_lines == 1 and spec.get("header"):
            what = "the file has its header line only"
        elif sum(skipped.values()):
            what = f"every example was left out by rule ({rules(skipped)})"
        else:
            what = "the file holds no example"
        raise CorpusError(f"no examples: {what}; every split needs examples")
    held = set()
    if hold_out:
        if hold_out >= len(examples):
            raise CorpusError(f"--hold-out {hold_out}: the file has only {len(examples)} examples")
        held = set(random.Random(seed).sample(range(len(examples)), hold_out))
        with open(hold_out_out, "w", encoding="utf-8") as f:
            f.writelines(e for i, e in enumerate(examples) if i in held)
    with open(out, "w", encoding="utf-8") as f:
        f.writelines(e for i, e in enumerate(examples) if i not in held)
    report = f"{path}: {len(examples) - len(held)} examples -> {out}"
    if held:
        report += f", {len(held)} held out (seed {seed}) -> {hold_out_out}"
    print(f"{report}; skipped by rule: {rules(skipped)}", file=sys.stderr)
    if summary:
        details = {"file": str(path), "examples": len(examples) - len(held), "skipped_by_rule": skipped}
        if held:
            details["held_out"] = {"examples": len(held), "seed": seed, "to": "valid"}
        with open(summary, "w", encoding="utf-8") as f:
            json.dump(details, f)


def rules(skipped):
    return "; ".join(f"{count} {reason}" for reason, count in skipped.items())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--format", choices=sorted(FORMATS))
    parser.add_argument(
        "--labels",
        choices=sorted(FORMATS),
        metavar="FORMAT",
        help="print the label set of FORMAT, one a line, in its fixed order, and exit",
    )
    parser.add_argument("--hold-out", metavar="N:FILE", help="write N random examples (seeded) to FILE instead")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--summary", metavar="FILE", help="write the counts as JSON to FILE (for prep.json)")
    parser.add_argument("input", nargs="?")
    parser.add_argument("output", nargs="?")
    args = parser.parse_args()
    if args.labels:
        print("\n".join(FORMATS[args.labels]["labels"]))
        return
    if not (args.format and args.input and args.output):
        parser.error("give --format, an input file and an output file")
    hold_out, hold_out_out = 0, None
    if args.hold_out:
        count, _, hold_out_out = args.hold_out.partition(":")
        if not count.isdigit() or not hold_out_out:
            parser.error(f"--hold-out takes N:FILE, not {args.hold_out!r}")
        hold_out = int(count)
    try:
        convert(args.format, args.input, args.output, hold_out, hold_out_out, args.seed, args.summary)
    except CorpusError as error:
        sys.exit(f"error: {args.input}: {error}")
    except TextError as error:
        sys.exit(f"error: {error}")
    except FileNotFoundError as error:
        sys.exit(f"error: {error.filename}: no such file")


if __name__ == "__main__":
    main()
