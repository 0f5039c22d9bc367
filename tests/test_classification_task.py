"""The classification tasks' label files: lines end at "\n" only, errors name the file and line."""

import argparse
import shutil
from pathlib import Path

import pytest

import phm_fairseq  # noqa: F401  (registers the tasks)
from phm_fairseq.tasks.nli import NLITask
from phm_fairseq.tasks.sentence_classification import SentenceClassificationTask

FIXTURE_DATA = Path(__file__).resolve().parent / "fixtures" / "checkpoints" / "data"


@pytest.fixture
def task(tmp_path):
    shutil.copytree(FIXTURE_DATA / "sentence", tmp_path / "data")  # dict.txt and labels.txt: no, yes
    return SentenceClassificationTask.setup_task(argparse.Namespace(data=str(tmp_path / "data"), seed=1))


def write(task, split, text):
    (Path(task.args.data) / f"{split}.label").write_bytes(text.encode("utf-8"))


def test_targets_split_on_newlines_only_and_a_final_newline_is_optional(task):
    write(task, "train", "yes\r\nno\nyes")  # Windows line end, no final newline
    assert task.read_targets("train", 3).tolist() == [1, 0, 1]
    write(task, "train", "yes\nno\n")
    assert task.read_targets("train", 2).tolist() == [1, 0]


@pytest.mark.parametrize(
    "text,line,label",
    [
        ("yes\nno\u2028yes\nno\n", 2, "no\u2028yes"),  # U+2028 is no line break: line 2 holds both words
        ("yes\rno\nmaybe\n", 1, "yes\rno"),  # a stray carriage return neither
        ("yes\nno\rno\nmaybe\n", 2, "no\rno"),
    ],
)
def test_a_label_with_a_line_separator_inside_is_one_unknown_label_on_its_true_line(task, text, line, label):
    write(task, "valid", text)
    path = Path(task.args.data) / "valid.label"
    with pytest.raises(ValueError) as error:
        task.read_targets("valid", text.count("\n"))
    assert str(error.value).startswith(f"{path}:{line}: unknown label {label!r} (labels.txt has no, yes)")


def test_true_line_numbers_after_stray_carriage_returns(task):
    write(task, "test", "yes\rno\nno\nyes\nmaybe")  # with universal newlines, 'maybe' would be line 5
    with pytest.raises(ValueError, match=r"test\.label:1: unknown label 'yes\\rno'"):
        task.read_targets("test", 4)
    write(task, "test", "yes\nno\nno\u2028\nmaybe")
    with pytest.raises(ValueError, match=r"test\.label:4: unknown label 'maybe'"):
        task.read_targets("test", 4)


def test_label_count_must_match_the_examples(task):
    write(task, "train", "yes\nno\n")
    with pytest.raises(ValueError, match=r"train\.label has 2 labels for 3 examples"):
        task.read_targets("train", 3)


def test_label_set_errors_name_the_file_and_line(tmp_path):
    (tmp_path / "labels.txt").write_text("entailment\nneutral\r\ncontradiction\nneutral")
    with pytest.raises(ValueError, match=r"labels\.txt:4: label 'neutral' again \(it is on line 2\)"):
        SentenceClassificationTask.read_labels(str(tmp_path))
    (tmp_path / "labels.txt").write_text("yes\u2028no\n")
    with pytest.raises(
        ValueError,
        match=r"labels\.txt: expected two or more distinct labels, one a line; "
        r"found \['yes\\u2028no'\]",
    ):
        SentenceClassificationTask.read_labels(str(tmp_path))
    (tmp_path / "labels.txt").write_text("no\nyes")  # no final newline
    assert SentenceClassificationTask.read_labels(str(tmp_path)) == ["no", "yes"]


def test_the_tasks_say_what_their_data_directory_is(tmp_path):
    with pytest.raises(
        FileNotFoundError,
        match=r"premise/dict\.txt not found: .* is not an NLI data directory "
        r"\(make one with data-prep, e\.g\. bash data-prep/snli\.sh --out",
    ):
        NLITask.setup_task(argparse.Namespace(data=str(tmp_path)))
    shutil.copytree(FIXTURE_DATA / "nli", tmp_path / "nli")
    (tmp_path / "nli" / "hypothesis" / "dict.txt").write_text("other 1\n")
    with pytest.raises(ValueError, match=r"differ: premise and hypothesis must share one dictionary"):
        NLITask.setup_task(argparse.Namespace(data=str(tmp_path / "nli")))
    with pytest.raises(FileNotFoundError, match=r"is not a sentence classification data directory"):
        SentenceClassificationTask.setup_task(argparse.Namespace(data=str(tmp_path)))


def test_criterion_keeps_counts_as_tensors_and_reduces_them_to_accuracy():
    import torch
    from fairseq.logging import metrics

    from phm_fairseq.criterions.classification import ClassificationCriterion

    criterion = ClassificationCriterion(task=None)
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [3.0, 0.0], [0.0, 2.0]])
    outputs = []
    for rows, target in ((slice(0, 2), [0, 0]), (slice(2, 4), [0, 1])):  # 1 of 2, then 2 of 2 right
        sample = {"net_input": {"x": logits[rows]}, "target": torch.tensor(target), "ntokens": 6}
        _loss, size, logging_output = criterion(lambda x: x, sample)
        assert size == 2 and torch.is_tensor(logging_output["ncorrect"])  # no .item() per step
        outputs.append(logging_output)
    with metrics.aggregate() as aggregate:
        ClassificationCriterion.reduce_metrics(outputs)
        assert aggregate.get_smoothed_values()["accuracy"] == 75.0


def test_nli_architecture_keeps_the_values_a_user_gives_even_zero():
    from phm_fairseq.models.lstm_nli import base_architecture

    args = argparse.Namespace(dropout=0.0, encoder_layers=2)
    base_architecture(args, "phm")
    assert (args.dropout, args.encoder_layers, args.encoder_hidden_size, args.linear_kind) == (0.0, 2, 300, "phm")


def test_each_model_family_refuses_another_familys_task_when_it_is_built(copy_task):
    """Refused when fairseq builds the model, naming the task it needs (not a traceback at the first
    batch, nor after an epoch of training)."""
    from argparse import Namespace

    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.tasks.translation import TranslationTask

    from phm_fairseq.tasks.nli import NLITask
    from phm_fairseq.tasks.sentence_classification import SentenceClassificationTask

    translation = TranslationTask.setup_task(
        Namespace(data=str(copy_task), source_lang="src", target_lang="tgt", left_pad_source=True)
    )
    nli, sentences = NLITask.__new__(NLITask), SentenceClassificationTask.__new__(SentenceClassificationTask)
    for arch, task, message in [
        ("phm_lstm_nli", translation, "an NLI .* model: it trains with --task nli .*, not --task translation"),
        ("phm_lstm_nli", sentences, "it trains with --task nli .*, not --task sentence_classification"),
        ("phm_transformer_classifier", nli, "a sentence classifier: it trains with --task sentence_classification"),
        (
            "phm_transformer_demo",
            sentences,
            "a translation .* model: it trains with --task translation .*, not --task sentence_classification",
        ),
        ("quaternion_transformer_demo", nli, "it trains with --task translation .*, not --task nli"),
    ]:
        with pytest.raises(ValueError, match=message):
            ARCH_MODEL_REGISTRY[arch].build_model(Namespace(arch=arch), task)


def test_phm_evaluate_refuses_a_batch_size_below_one(capsys):
    from phm_fairseq.cli import evaluate

    for size in ("0", "-5", "many"):
        with pytest.raises(SystemExit) as exit:
            evaluate.main(["DATA", "--path", "x.pt", "--batch-size", size])
        assert exit.value.code == 2
        assert f"expected a positive number of examples, not '{size}'" in capsys.readouterr().err
