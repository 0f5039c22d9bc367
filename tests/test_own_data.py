"""docs/own-data.md, run as a reader runs it: the ``bash`` blocks of the page, in order, in one
shell, in an empty folder outside the repository (where ``--user-dir phm_fairseq`` would not
resolve), with the test environment's commands on PATH; then what each step must have made.

The translation example runs in every test run; the classification examples, which continue in
the same folder, are marked slow."""

import json
import os
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
from fairseq.data import Dictionary

import phm_fairseq
from phm_fairseq.tasks.nli import NLITask

REPO = Path(__file__).resolve().parent.parent
PAGE = REPO / "docs" / "own-data.md"
TRAIN_PAIRS, TEST_PAIRS = 400, 40  # the splits the page cuts from Multi30k
PHM_N4_DEMO_LAYERS = 239_104  # parameters of phm_transformer_demo --phm-n 4 without embeddings (docs/results.md)

# the commands of the test environment; one thread a command: the steps are small, and threads
# fight on a shared machine
ENV = {
    **os.environ,
    "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    "OMP_NUM_THREADS": "1",
    "REPO": str(REPO),  # the page's name for the clone, whose data/multi30k it reads
}


def bash_blocks(section: str) -> list:
    """The ``bash`` blocks of the page's ``## section`` (to the next ``## `` heading)."""
    page = PAGE.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", page, flags=re.M | re.S)
    assert match, f"docs/own-data.md has no section '## {section}'"
    return re.findall(r"^```bash\n(.*?)^```$", match.group(1), flags=re.M | re.S)


def rows_of(tsv: Path) -> list:
    return [row.split("\t") for row in tsv.read_text(encoding="utf-8").split("\n")[:-1]]


def run_sections(folder: Path, *sections: str, env=ENV) -> None:
    script = "\n".join(["set -euo pipefail", *(block for section in sections for block in bash_blocks(section))])
    result = subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"docs/own-data.md failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}"


@pytest.fixture(scope="module")
def translated(tmp_path_factory) -> Path:
    """The empty folder in which the page's translation example ran."""
    folder = tmp_path_factory.mktemp("own-data")
    run_sections(folder, "The plugin's folder, from anywhere", "Translation")
    return folder


@pytest.fixture(scope="module")
def classified(translated) -> Path:
    """The same folder after the page's classification examples (they read the translation
    example's tokenized text, and $PHM, which the translation example found)."""
    run_sections(translated, "Classification", env={**ENV, "PHM": phm_fairseq.PLUGIN_DIR})
    return translated


def test_the_plugin_folder_comes_from_the_documented_one_liner():
    (one_liner,) = bash_blocks("The plugin's folder, from anywhere")
    assert one_liner == 'PHM=$(python -c "import phm_fairseq; print(phm_fairseq.PLUGIN_DIR)")\n'


def test_the_readme_shows_the_commands_of_the_page():
    """README's "Train on your own data" block is the page's commands (the page's are run below)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^### Translation\n(.*?)^### ", readme.split("## Train on your own data", 1)[1], re.M | re.S)
    (block,) = re.findall(r"^```bash\n(.*?)^```$", section.group(1), flags=re.M | re.S)

    def lines(text: str) -> list:  # without comments and indentation
        return [line.split("  #")[0].strip() for line in text.split("\n") if line.split("  #")[0].strip()]

    tested = set(lines("\n".join(bash_blocks("The plugin's folder, from anywhere") + bash_blocks("Translation"))))
    shown = lines(block)
    assert len(shown) > 20 and not [line for line in shown if line not in tested]


@pytest.mark.slow
def test_the_translation_example_trains_phm_from_another_folder_and_scores_its_translations(translated):
    log = (translated / "work" / "train.log").read_text()
    # --user-dir "$PHM" from a folder without phm_fairseq/ built the plugin's model: PHM n=4 at
    # the demo size, with the embeddings of the corpus's joined dictionary
    assert not (translated / "phm_fairseq").exists()
    assert "fairseq_cli.train | model: HypercomplexTransformerModel" in log
    words = len(Dictionary.load(str(translated / "data-bin" / "own.en-de" / "dict.en.txt")))
    assert f"num. shared model params: {PHM_N4_DEMO_LAYERS + 128 * words:,} " in log
    losses = [float(loss) for loss in re.findall(r"\| train_inner \|.*? loss=([0-9.]+),", log)]
    assert len(losses) == 6, log[-3000:]  # 30 updates, logged every 5: --log-interval took effect
    assert losses[-1] < losses[0] - 1.0, losses

    hypotheses = (translated / "work" / "test.hyp").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == TEST_PAIRS  # every test sentence
    # detokenized: the BPE joined and Moses' escapes undone, as sacrebleu expects
    assert not any(mark in h for h in hypotheses for mark in ("@@", "&amp;", "&apos;", "&quot;"))
    scores = json.loads((translated / "work" / "test.scores").read_text())
    assert [score["name"] for score in scores] == ["BLEU", "chrF2"]
    assert all(0 <= score["score"] <= 100 for score in scores)


@pytest.mark.slow
def test_the_sentence_classification_example_learns_the_language_of_a_sentence(classified):
    report = json.loads((classified / "work" / "test-cls.out").read_text().strip().split("\n")[-1])
    assert report["labels"] == ["en", "de"]
    assert report["examples"] == 2 * TEST_PAIRS
    assert report["accuracy"] >= 90, report  # the majority class: 50%


@pytest.mark.slow
def test_the_nli_example_makes_a_directory_that_the_nli_task_reads(classified):
    task = NLITask.setup_task(Namespace(data=str(classified / "data-bin" / "own-nli"), seed=1))
    assert task.labels == ["yes", "no"]
    for split, pairs in (("train", TRAIN_PAIRS), ("valid", TEST_PAIRS), ("test", TEST_PAIRS)):
        rows = rows_of(classified / "nli" / f"{split}.tsv")
        dataset = task.load_dataset(split)
        assert len(dataset) == len(rows) == 2 * pairs - 1  # each pair, and each with the next pair's German
        assert [task.labels[dataset[i]["target"]] for i in range(len(rows))] == [row[0] for row in rows]
    # every training word is in the shared dictionary: the text comes back as it went in
    for i, (_label, premise, hypothesis) in enumerate(rows_of(classified / "nli" / "train.tsv")):
        example = task.datasets["train"][i]
        assert task.dictionary.string(example["net_input.premise"]) == premise
        assert task.dictionary.string(example["net_input.hypothesis"]) == hypothesis
