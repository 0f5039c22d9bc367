"""phm-run and phm-collect on a tiny grid of real runs: configs in, the paper's table out."""

import csv
import json
import shutil

import pytest
import torch
import yaml
from conftest import TINY, TRAIN_COMMAND, console, run_command, run_main, slow

from phm_experiments.cli import collect as phm_collect
from phm_experiments.cli import run as phm_run
from phm_experiments.config import ConfigError, expand, load_config
from phm_experiments.logs import TrainingLog


@pytest.fixture(scope="module")
@slow
def grid(copy_task, tmp_path_factory):
    """configs/tiny/{_base, transformer, phm_n2}.yaml run through phm-run: the folder at seed 1, then
    phm_n2 alone at seed 2 (a row of one seed and a row of two; three runs, each a training and a
    generation)."""
    root = tmp_path_factory.mktemp("kit")
    configs = root / "configs" / "tiny"
    configs.mkdir(parents=True)
    # a reference with a U+2028 (a legal character inside a line): 64 lines all the same
    lines = (copy_task.parent / "test.tgt").read_text().split("\n")
    lines[0] = lines[0].replace(" ", "\u2028", 1)
    (root / "test.tgt").write_text("\n".join(lines), encoding="utf-8")
    base = {
        "data": str(copy_task),
        "seed": 1,
        "train": {
            "task": "translation",
            "share-all-embeddings": True,
            "optimizer": "adam",
            "lr": 0.005,
            "criterion": "label_smoothed_cross_entropy",
            "max-tokens": 2048,
            "max-update": 40,
            "no-epoch-checkpoints": True,
            "no-progress-bar": True,
            "log-interval": 10,
            **TINY,
        },
        "evaluate": {
            "kind": "bleu",
            "reference": str(root / "test.tgt"),
            "generate": {"gen-subset": "test", "beam": 5, "lenpen": 0.6, "required-batch-size-multiple": 1},
        },
    }
    (configs / "_base.yaml").write_text(yaml.safe_dump(base))
    (configs / "transformer.yaml").write_text("extends: _base.yaml\ntrain: {arch: transformer_twin_demo}\n")
    (configs / "phm_n2.yaml").write_text(
        "extends: _base.yaml\npaper: {bleu: 99.9}\ntrain: {arch: phm_transformer_demo, phm-n: 2}\n"
    )
    runs = root / "runs"
    first = run_main(phm_run.main, configs, "--runs-dir", runs, "--seeds", "1")
    second = run_main(phm_run.main, configs / "phm_n2.yaml", "--runs-dir", runs, "--seeds", "2")
    return root, configs, runs, first.stdout + second.stdout


def test_every_config_and_seed_runs_once_and_then_is_skipped(grid):
    root, configs, runs, log = grid
    results = sorted(runs.rglob("result.json"))
    assert [str(p.relative_to(runs)) for p in results] == [
        "tiny/phm_n2/seed1/result.json",
        "tiny/phm_n2/seed2/result.json",
        "tiny/transformer/seed1/result.json",
    ]
    result = json.loads(results[0].read_text())
    assert result["seed"] == 1 and result["arch"] == "phm_transformer_demo"
    assert result["evaluation"]["metric"] == "bleu" and result["evaluation"]["examples"] == 64
    training = result["training"]
    assert "--seed 1" in training["command"] and training["updates"] == 40
    # 40 tiny updates take well under a second: fairseq prints train_wall 0, the speed must not be
    assert training["words_per_second"] > 0
    assert training["seconds_per_100_updates"] == pytest.approx(100 * training["train_seconds"] / 40, rel=0.01)
    assert result["parameters"]["without_embeddings"] < result["parameters"]["dense_without_embeddings"]
    again = run_main(phm_run.main, configs, "--runs-dir", runs, "--seeds", "1")
    again_seed2 = run_main(phm_run.main, configs / "phm_n2.yaml", "--runs-dir", runs, "--seeds", "2")
    assert again.stdout.count("done already") == 2 and again_seed2.stdout.count("done already") == 1
    assert TRAIN_COMMAND not in again.stdout + again_seed2.stdout


def test_collect_makes_the_papers_table_from_the_runs(grid, tmp_path):
    _root, _configs, runs, _log = grid
    out = tmp_path / "report"
    (tmp_path / "report.epochs.png").write_bytes(b"an earlier collect's plot")
    collected = run_command(console("phm-collect"), runs / "tiny", "--out", out)  # the installed command
    # no run has evaluate.epochs: no epochs plot, and none left from before beside this report
    assert not (tmp_path / "report.epochs.png").exists() and "epochs.png" not in collected.stdout
    results = {p.parent.parent.name: [] for p in runs.rglob("result.json")}
    for p in runs.rglob("result.json"):
        results[p.parent.parent.name].append(json.loads(p.read_text()))
    mean = {name: round(sum(r["evaluation"]["score"] for r in rs) / len(rs), 2) for name, rs in results.items()}
    rows = {row["row"]: row for row in csv.DictReader(open(f"{out}.csv"))}
    assert set(rows) == {"transformer", "phm_n2"}
    for name, row in rows.items():
        assert float(row["score"]) == mean[name] and row["seeds"] == {"transformer": "1", "phm_n2": "1 2"}[name]
    dense = results["transformer"][0]["parameters"]["without_embeddings"]
    phm = results["phm_n2"][0]["parameters"]["without_embeddings"]
    assert float(rows["phm_n2"]["params_change"]) == round(100 * (phm / dense - 1), 1)
    table = open(f"{out}.md").read()
    assert "| model | tiny |" in table  # the paper's layout: models down, corpora across
    assert table.index("| transformer |") < table.index("| phm_n2 |")  # dense first
    assert f"| phm_n2 | {mean['phm_n2']} ± " in table and "(99.9)" in table  # mean ± std (paper)
    assert table.count(TRAIN_COMMAND) == 3 and table.count("fairseq-generate") == 3
    assert (tmp_path / "report.png").stat().st_size > 0 and (tmp_path / "report.curves.png").stat().st_size > 0


def set_load(record, training=None, evaluation=None):
    """The load averages a result.json records for its training and its evaluations."""
    result = json.loads(record.read_text())
    result["training"]["load_average"] = training
    for evaluation_record in [result["evaluation"], result["averaged_evaluation"], *result["epoch_evaluations"]]:
        if evaluation_record:
            evaluation_record["load_average"] = evaluation
    record.write_text(json.dumps(result))


def test_speeds_are_set_against_the_dense_model_only_like_for_like(grid, tmp_path):
    """A run at another thread count (or on another CPU) than the dense model's, or beside other work:
    its speed stands in the table, its ratio to the dense model's does not."""
    _root, _configs, runs, _log = grid
    shutil.copytree(runs / "tiny", tmp_path / "tiny")
    threads = json.loads((runs / "tiny/transformer/seed1/result.json").read_text())["environment"]["threads"]
    for record in (tmp_path / "tiny").rglob("result.json"):  # phm-run recorded the machine's load as it ran
        result = json.loads(record.read_text())
        assert result["training"]["load_average"] >= 0 and result["evaluation"]["load_average"] >= 0
        set_load(record, training=threads + 0.2, evaluation=threads + 0.2)  # each with the machine to itself
    run_main(phm_collect.main, tmp_path / "tiny", "--out", tmp_path / "same")
    rows = {row["row"]: row for row in csv.DictReader(open(tmp_path / "same.csv"))}
    assert float(rows["phm_n2"]["train_speed_vs_dense"]) > 0 and rows["phm_n2"]["eval_speed_vs_dense"]
    assert rows["phm_n2"]["train_load"] == f"{threads + 0.2} / {threads + 0.2}"
    # another run trained beside one seed (a load of its threads + 1), or its load is unknown (resumed, older)
    record = tmp_path / "tiny/phm_n2/seed2/result.json"
    for training_load in (threads + 1, None):
        set_load(record, training=training_load, evaluation=threads + 0.2)
        run_main(phm_collect.main, tmp_path / "tiny", "--out", tmp_path / "loaded")
        rows = {row["row"]: row for row in csv.DictReader(open(tmp_path / "loaded.csv"))}
        assert rows["phm_n2"]["train_speed_vs_dense"] == "" and float(rows["phm_n2"]["eval_speed_vs_dense"]) > 0
    set_load(tmp_path / "tiny/transformer/seed1/result.json", training=threads + 0.2, evaluation=threads + 1)
    run_main(phm_collect.main, tmp_path / "tiny", "--out", tmp_path / "loaded")
    rows = {row["row"]: row for row in csv.DictReader(open(tmp_path / "loaded.csv"))}
    assert rows["phm_n2"]["eval_speed_vs_dense"] == rows["transformer"]["eval_speed_vs_dense"] == ""
    set_load(record, training=threads + 0.2, evaluation=threads + 0.2)
    set_load(tmp_path / "tiny/transformer/seed1/result.json", training=threads + 0.2, evaluation=threads + 0.2)
    result = json.loads(record.read_text())
    result["environment"]["threads"] = threads + 1
    record.write_text(json.dumps(result))
    collected = run_main(phm_collect.main, tmp_path / "tiny", "--out", tmp_path / "mixed")
    rows = {row["row"]: row for row in csv.DictReader(open(tmp_path / "mixed.csv"))}
    assert rows["phm_n2"]["threads"] == f"{threads} / {threads + 1}"
    assert rows["phm_n2"]["train_speed_vs_dense"] == rows["phm_n2"]["eval_speed_vs_dense"] == ""
    assert float(rows["transformer"]["train_speed_vs_dense"]) == 1.0
    assert f"torch threads: {threads} / {threads + 1}, by run" in (tmp_path / "mixed.md").read_text(), collected.stdout
    # the same thread count on a CPU whose kernels differ (one model name covers AVX2 and AVX512 EPYCs)
    assert result["environment"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    result["environment"].update(threads=threads, cpu_capability="another")
    record.write_text(json.dumps(result))
    run_main(phm_collect.main, tmp_path / "tiny", "--out", tmp_path / "kernels")
    rows = {row["row"]: row for row in csv.DictReader(open(tmp_path / "kernels.csv"))}
    assert rows["phm_n2"]["threads"] == f"{threads} / {threads}" and rows["phm_n2"]["train_speed_vs_dense"] == ""
    assert rows["phm_n2"]["cpu_kernels"].endswith(" / another")
    assert "another, by run: the CPU kernels column" in (tmp_path / "kernels.md").read_text()


def fairseq_record(time: str, tag: str, epoch: int, **stats) -> str:
    """A line of fairseq-train's --log-format json output: its stats are strings, prefixed by the tag."""
    values = {"epoch": epoch, **{f"{tag}_{key}": str(value) for key, value in stats.items()}}
    return f"2026-11-21 {time} | INFO | {tag} | {json.dumps(values)}"


def test_training_speed_of_a_resumed_run_counts_only_its_own_updates():
    # fairseq-train's own records (--log-format json), from a run resumed at the end of epoch 3
    train = dict(wpb=2481.8, bsz=182.1, lr=0.001)
    log = (
        "\n".join(
            [
                "2026-11-21 08:40:44 | INFO | fairseq.trainer | "
                "Loaded checkpoint ck/checkpoint_last.pt (epoch 3 @ 303 updates)",
                fairseq_record(
                    "08:42:54",
                    "train",
                    4,
                    loss=7.795,
                    wps=1952.6,
                    ups=0.79,
                    num_updates=404,
                    train_wall=125,
                    wall=131,
                    **train,
                ),
                fairseq_record("08:43:02", "valid", 4, loss=7.5, num_updates=404),
                fairseq_record(
                    "08:44:50",
                    "train",
                    5,
                    loss=7.401,
                    wps=2170.4,
                    ups=0.87,
                    num_updates=505,
                    train_wall=111,
                    wall=246,
                    **train,
                ),
                fairseq_record(
                    "08:44:51",
                    "train",
                    6,
                    loss=0.9,
                    wps=9791.5,
                    ups=41.33,
                    wpb=234.6,
                    bsz=31.8,
                    num_updates=527,
                    lr=0.001,
                    train_wall=0,
                    wall=247,
                ),
            ]
        )
        + "\n"
    )
    speed = TrainingLog.parse(log).speed()
    seconds = 125 + 111 + 22 / 41.33  # whole seconds where they are precise, updates / ups where not
    assert speed["train_seconds"] == pytest.approx(seconds, abs=0.01)
    assert speed["seconds_per_100_updates"] == pytest.approx(100 * seconds / 224)
    assert speed["words_per_second"] == pytest.approx((2481.8 * 202 + 234.6 * 22) / seconds)


def test_config_errors_are_clear(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\ndata: x\n")
    (tmp_path / "b.yaml").write_text("extends: a.yaml\n")
    with pytest.raises(ConfigError, match="loops back"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("data: x\ntrain: {arch: a}\n")
    with pytest.raises(ConfigError, match=r"evaluate: missing"):
        load_config(tmp_path / "c.yaml")
    (tmp_path / "d.yaml").write_text("data: x\ntrain: {}\nevaluate: {kind: rouge}\n")
    with pytest.raises(ConfigError, match="evaluate.kind: must be one of bleu, accuracy, not 'rouge'"):
        load_config(tmp_path / "d.yaml")


def test_every_problem_of_a_config_is_listed_with_where_it_is(tmp_path):
    (tmp_path / "x.yaml").write_text(
        "data: 3\nseeed: 2\ntrain: {arch: a, --lr: 1, user-dir: p, dropout: [1]}\n"
        "evaluate: {kind: bleu, reference: '{dta}/test.de', generat: {}}\npaper: {bleu: high}\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "x.yaml")
    lines = str(error.value).splitlines()
    assert lines[0] == f"{tmp_path / 'x.yaml'}:"
    assert sorted(line.strip() for line in lines[1:]) == sorted(
        [
            "seeed: unknown key (did you mean 'seed'?); known keys: description, paper, data, prepare, seed, "
            "count_module, train, evaluate, teacher, distill, init",
            "data: input should be a valid string, got 3",
            "train.--lr: write the option without its dashes (lr)",
            "train.user-dir: phm-run passes the plugin's folder; remove it",
            "train.dropout: expected one value (a string, number or true/false), got [1]",
            "evaluate.reference: unknown placeholder {dta} (did you mean 'data'?); known: {data}, {run}, {teacher}",
            "evaluate.generat: unknown key (did you mean 'generate'?); known keys: kind, epochs, average_last, "
            "reference, generate",
            "paper.bleu: input should be a number, got 'high'",
        ]
    )
    # the rules between keys, once every key is valid
    (tmp_path / "y.yaml").write_text(
        "data: x\nprepare: cp {teacher}/x .\ndistill: true\ntrain: {arch: a, keep-last-epochs: 2, max-epoch: 2}\n"
        "evaluate: {kind: accuracy, average_last: 5, epochs: [0, 3]}\n"
    )
    with pytest.raises(ConfigError) as error:
        load_config(tmp_path / "y.yaml")
    assert [line.strip() for line in str(error.value).splitlines()[1:]] == [
        "{teacher} is used, but the config has no `teacher`",
        "distill: needs a `teacher` config, whose model translates the training source",
        "distill: sequence-level distillation is for translation (evaluate.kind bleu)",
        "evaluate.average_last 5: train.keep-last-epochs 2 keeps fewer epoch checkpoints",
        "evaluate.epochs: epoch 0 is the init checkpoint (the model before any training), but the config has no init",
        "evaluate.epochs: epoch 3 is past train.max-epoch 2",
    ]


def test_the_schema_is_written_once_and_the_docs_show_it():
    """docs/experiments.md's table of keys is phm-run --schema's, made from the pydantic models."""
    from phm_experiments.cli.run import main
    from phm_experiments.config import Config, schema_table

    docs = (__import__("conftest").REPO / "docs" / "experiments.md").read_text()
    assert schema_table() in docs, "docs/experiments.md: paste `phm-run --schema`'s table in place of the old one"
    for key in Config.model_fields:
        assert f"| `{key}` |" in schema_table()
    assert main(["--schema"]) == 0


def test_extends_overrides_key_by_key_and_null_removes(tmp_path):
    (tmp_path / "_base.yaml").write_text(
        "data: d\ntrain: {arch: a, lr: 1, dropout: 0.3}\n"
        "evaluate: {kind: bleu, reference: r, generate: {beam: 5, tokenizer: moses}}\n"
    )
    (tmp_path / "x.yaml").write_text(
        "extends: _base.yaml\ntrain: {lr: 2, dropout: null}\nevaluate: {generate: {tokenizer: null}}\n"
    )
    config = load_config(tmp_path / "x.yaml")
    assert config.train == {"arch": "a", "lr": 2}
    assert config.values["evaluate"] == {"kind": "bleu", "reference": "r", "generate": {"beam": 5}}


def test_every_shipped_config_passes_the_complete_check(tmp_path):
    """Keys, types, placeholders and fairseq-train's and fairseq-generate's own parsers, for every
    config in configs/ (nothing is built and no data is read: most corpora are not prepared here)."""
    from phm_experiments.checks import check_all

    jobs = check_all([str(__import__("conftest").REPO / "configs")], tmp_path / "runs", seeds=[1, 2])
    assert len(jobs) == 2 * len(expand([str(__import__("conftest").REPO / "configs")])) > 100
    for config, seed in jobs:
        assert config.arch and config.with_seed(seed).seed == seed, config.path


def test_the_lr_check_trains_the_converged_tables_models_with_only_lr_and_length_changed():
    """configs/converged/multi30k_lr_check repeats some model sizes of ../multi30k (an `extends` has
    one base): each check config must train its converged model (<kind>_lr<NNN> against <kind>.yaml)
    on the same data with the same recipe, only lr, max-epoch and patience told apart."""
    import re

    converged = __import__("conftest").REPO / "configs" / "converged"
    checks = expand([str(converged / "multi30k_lr_check")])
    assert len(checks) >= 10
    for path in checks:
        kind = re.fullmatch(r"(.+)_lr\d{3}", path.stem)[1]
        check, model = load_config(path).values, load_config(converged / "multi30k" / f"{kind}.yaml").values
        differ = {"lr", "max-epoch", "patience"}
        assert {k: v for k, v in check["train"].items() if k not in differ} == {
            k: v for k, v in model["train"].items() if k not in differ
        }, path.name
        assert (check["data"], check["prepare"], check["evaluate"]) == (
            model["data"],
            model["prepare"],
            model["evaluate"],
        ), path.name
        assert check["train"]["lr"] == float("0." + path.stem[-3:]) and check["train"]["max-epoch"] == 8, path.name
