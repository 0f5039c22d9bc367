"""Sequence-level knowledge distillation (Kim & Rush, 2016): the teacher translates the training
source, and its translations become the training targets of the student.

The distilled data is made once per teacher run and search options, and kept in the teacher's
run folder (``TEACHER_RUN/distill/<hash of the options>/``): fairseq-generate on the train split
with the teacher's checkpoint_best.pt, its hypotheses in the training data's own tokens (no
detokenization, no BPE removal), binarized by fairseq-preprocess with the teacher data's
dictionaries; valid and test are the original data's. The folder appears only complete
(it is built beside and renamed at the end), with ``distill.json`` naming its commands.
"""

import hashlib
import json
import shutil
from pathlib import Path

from . import commands
from .commands import options
from .results import Distillation, portable_command
from .run_folder import RunFolder

# taken from the teacher's evaluate.generate unless the student's `distill` gives them
SEARCH_OPTIONS = ("beam", "lenpen", "batch-size", "max-tokens", "source-lang", "target-lang")
# fairseq-generate options that would make the outputs unfit as training targets
IN_TOKENS = "the teacher's outputs must stay in the training data's tokens (BPE and all)"
REFUSED = {
    "gen-subset": "phm-run translates the train split",
    "post-process": IN_TOKENS,
    "remove-bpe": IN_TOKENS,  # fairseq's other name for post-process
    "nbest": "one translation per sentence",
    # fairseq-generate decodes the source lines it prints (S-) with these: the student's source would
    # no longer be its training data's
    "tokenizer": "the source must stay in the training data's tokens",
    "bpe": "the source must stay in the training data's tokens (BPE and all)",
}


class DistillationFailed(RuntimeError):
    pass


def refused(distill: dict) -> list:
    """The problems of a student's `distill` options that would corrupt the distilled training data."""
    return [
        f"distill.{key}: {REFUSED[key]}; remove it"
        for key, value in (distill or {}).items()
        if key in REFUSED and value is not False  # false leaves the option out
    ]


def search_options(student, teacher) -> dict:
    chosen = {key: teacher.evaluate.generate[key] for key in SEARCH_OPTIONS if key in teacher.evaluate.generate}
    return {**chosen, **student.distill}


def language_pair(teacher) -> tuple:
    from fairseq.data import data_utils

    source, target = teacher.train.get("source-lang"), teacher.train.get("target-lang")
    if source and target:
        return source, target
    inferred = data_utils.infer_language_pair(teacher.data)
    if inferred == (None, None):
        raise DistillationFailed(
            f"{teacher.data}: cannot tell the language pair; give train.source-lang and train.target-lang"
        )
    return inferred


def distilled_data(student, teacher, teacher_run: Path, teacher_fingerprint: str) -> tuple:
    """(the distilled data folder, its Distillation record), made now or found in the cache."""
    from fairseq.data import data_utils

    search = search_options(student, teacher)
    key = hashlib.sha256(json.dumps({"teacher": teacher_fingerprint, "search": search}, sort_keys=True).encode())
    teacher_folder = RunFolder(teacher_run)
    folder = teacher_folder.distill / key.hexdigest()[:12]
    record = folder / "distill.json"
    if record.is_file():
        print(f"== distilled data of {teacher.path.name} (seed {teacher.seed}): {folder}", flush=True)
        return folder, Distillation.model_validate_json(record.read_text(encoding="utf-8"))

    source, target = language_pair(teacher)
    data = Path(teacher.data)
    pair = f"{source}-{target}"
    train_source = data / f"train.{pair}.{source}"
    examples = len(data_utils.load_indexed_dataset(str(train_source), None))
    work = folder.with_name(folder.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    print(
        f"== distilling: {teacher.path.name} (seed {teacher.seed}) translates the {examples:,} training "
        f"sentences of {data}",
        flush=True,
    )
    generate = commands.fairseq_generate_command(
        data,
        teacher_folder.best,
        "--gen-subset",
        "train",
        "--required-batch-size-multiple",
        "1",
        "--skip-invalid-size-inputs-valid-test",
        *options({"source-lang": source, "target-lang": target, **search}),
    )
    # fairseq-generate's output is large (five lines a sentence): kept in its own log
    finished = commands.run(generate, work / "generate.log", quiet=True)
    sources, hypotheses = {}, {}
    for line in finished.stdout.split("\n"):
        if line.startswith("S-"):
            index, text = line.split("\t", 1)
            sources[int(index[2:])] = text
        elif line.startswith("H-"):
            index, _score, *text = line.split("\t")
            hypotheses[int(index[2:])] = text[0] if text else ""
    if sorted(hypotheses) != list(range(examples)) or sorted(sources) != list(range(examples)):
        raise DistillationFailed(
            f"the teacher translated {len(hypotheses)} of the {examples} training sentences of {data} "
            f"(see {work}/generate.log): sentences too long for the model are left out; raise the model's "
            "max positions or filter the data"
        )
    for lang, lines in ((source, sources), (target, hypotheses)):
        (work / f"train.{lang}").write_text("".join(lines[i] + "\n" for i in range(examples)), encoding="utf-8")
    preprocess = [
        "fairseq-preprocess",
        "--source-lang",
        source,
        "--target-lang",
        target,
        "--trainpref",
        str(work / "train"),
        "--destdir",
        str(work),
        "--srcdict",
        str(data / f"dict.{source}.txt"),
        "--tgtdict",
        str(data / f"dict.{target}.txt"),
        "--workers",
        "1",
    ]
    commands.run(preprocess, work / "distill.log")  # fairseq-preprocess writes its own preprocess.log
    for split in ("valid", "test"):
        for file in data.glob(f"{split}*.{pair}.*"):
            shutil.copy2(file, work / file.name)
    for lang in (source, target):
        (work / f"train.{lang}").unlink()  # the binarized copy is what fairseq reads
    distillation = Distillation(
        data=str(folder),
        generate_command=portable_command(generate),
        preprocess_command=portable_command(preprocess),
        examples=examples,
    )
    (work / "distill.json").write_text(json.dumps(distillation.model_dump(), indent=2) + "\n", encoding="utf-8")
    if folder.exists():
        shutil.rmtree(folder)
    work.rename(folder)
    return folder, distillation
