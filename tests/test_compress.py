"""The nearest PHM model to a dense one: the decomposition (phm_fairseq.modules) and phm-compress."""

import argparse
import contextlib
import io
import json
import math
import os
import re

import pytest
import torch
from conftest import (
    TINY_FLAGS,
    classes_in_checkpoint,
    fairseq_generate,
    hypotheses,
    losses,
    run_main,
    slow,
    train,
    transformer_body,
)

from phm_fairseq.cli import compress as compress_cli
from phm_fairseq.modules import (
    PHMLinear,
    QuaternionLinear,
    fit_phm_layer,
    kronecker_sum,
    load_kronecker_factors,
    multiplication_rule,
    nearest_kronecker_sum,
    nearest_with_rule,
)

F64 = torch.float64


def generator(seed=0):
    return torch.Generator().manual_seed(seed)


def direct_error(weight, factors):
    return float((weight - factors.weight()).norm() / weight.norm())


# --- the decomposition ----------------------------------------------------------------------


@pytest.mark.parametrize("n,k,d", [(1, 3, 5), (2, 6, 8), (3, 9, 6), (4, 8, 12), (8, 16, 24)])
def test_a_sum_of_n_kronecker_products_is_recovered_exactly(n, k, d):
    g = generator(n)
    A, S = torch.randn(n, n, n, dtype=F64, generator=g), torch.randn(n, k // n, d // n, dtype=F64, generator=g)
    W = kronecker_sum(A, S)
    factors = nearest_kronecker_sum(W, n)
    assert factors.relative_error < 1e-14
    torch.testing.assert_close(factors.weight(), W, rtol=0, atol=1e-12)
    # in float32 the factors come back in float32, exact to float32 precision
    factors32 = nearest_kronecker_sum(W.float(), n)
    assert factors32.A.dtype == factors32.S.dtype == torch.float32
    assert factors32.relative_error < 1e-6 and direct_error(W.float(), factors32) < 1e-6


@pytest.mark.parametrize("n,k,d", [(2, 32, 16), (4, 64, 32), (8, 64, 128)])
def test_reported_error_is_the_direct_frobenius_error(n, k, d):
    W = torch.randn(k, d, generator=generator(1))
    factors = nearest_kronecker_sum(W, n)
    assert 0.1 < factors.relative_error < 1  # a random matrix is far from any Kronecker sum
    assert factors.relative_error == pytest.approx(direct_error(W, factors), rel=1e-5)


def least_squares_by_gradient_descent(W, n, seed):
    g = generator(seed)
    k, d = W.shape
    A = torch.randn(n, n, n, dtype=F64, generator=g).requires_grad_()
    S = torch.randn(n, k // n, d // n, dtype=F64, generator=g).requires_grad_()
    optimizer = torch.optim.LBFGS(
        [A, S], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15, line_search_fn="strong_wolfe"
    )

    def closure():
        optimizer.zero_grad()
        loss = (kronecker_sum(A, S) - W).square().sum()
        loss.backward()
        return loss

    for _ in range(4):
        optimizer.step(closure)
    with torch.no_grad():
        return float((kronecker_sum(A, S) - W).norm() / W.norm())


@pytest.mark.parametrize("n,k,d", [(2, 6, 8), (3, 6, 9), (4, 8, 12)])
def test_no_sum_found_by_gradient_descent_is_nearer(n, k, d):
    W = torch.randn(k, d, dtype=F64, generator=generator(2))
    best = nearest_kronecker_sum(W, n).relative_error
    found = [least_squares_by_gradient_descent(W, n, seed) for seed in range(5)]
    # The truncated SVD is optimal: descent never does better (up to rounding) ...
    assert min(found) >= best - 1e-12, (best, found)
    # ... and reaches it, so the comparison is with a real optimiser, not a stuck one.
    assert min(found) <= best + 1e-6, (best, found)


def test_n1_is_exact_for_any_matrix():
    W = torch.randn(7, 5, generator=generator(3))
    factors = nearest_kronecker_sum(W, 1)
    assert factors.relative_error == 0.0
    assert torch.equal(factors.A, torch.ones(1, 1, 1)) and torch.equal(factors.S[0], W)


def test_error_falls_as_n_falls_on_a_generic_matrix():
    # Not a theorem for every matrix (n=16 with 4 x 4 blocks is exact again: n^3 parameters
    # then exceed k*d), but for the n of real models, where k*d/n dominates n^3, the fewer
    # the terms the fewer the parameters and the larger the error; a Gaussian matrix is far
    # from every such sum, with errors that concentrate.
    W = torch.randn(128, 256, generator=generator(4))
    errors = [nearest_kronecker_sum(W, n).relative_error for n in (1, 2, 4, 8)]
    assert errors[0] == 0.0 and errors == sorted(errors) and errors[1] > 0.5


def test_each_term_has_the_scale_of_a_fresh_layer_and_a_deterministic_sign():
    W = torch.randn(64, 32, dtype=F64, generator=generator(5))
    n = 4
    factors = nearest_kronecker_sum(W, n)
    # ||A_i||_F = sqrt(n) for every i: sum_i ||A_i||^2 = n^2, as PHMLinear's init gives on
    # average and as an algebra rule has; S carries the scale of W.
    torch.testing.assert_close(factors.A.flatten(1).norm(dim=1), torch.full((n,), math.sqrt(n), dtype=F64))
    fresh = PHMLinear(32, 64, n=n)
    assert fresh.A.square().sum().item() == pytest.approx(n * n, rel=1e-5)
    # The sign of each (A_i, S_i) pair is fixed, not left to the SVD: -W gives the same A.
    negated = nearest_kronecker_sum(-W, n)
    torch.testing.assert_close(negated.A, factors.A, rtol=0, atol=1e-12)
    torch.testing.assert_close(negated.S, -factors.S, rtol=0, atol=1e-12)
    first_largest = factors.A.flatten(1).abs().argmax(dim=1)
    assert (factors.A.flatten(1)[torch.arange(n), first_largest] > 0).all()


def test_blocks_smaller_than_n_terms_still_give_n_terms():
    W = torch.randn(4, 8, dtype=F64, generator=generator(6))  # n=4: blocks 1 x 2, R is 16 x 2
    factors = nearest_kronecker_sum(W, 4)
    assert factors.A.shape == (4, 4, 4) and factors.S.shape == (4, 1, 2)
    assert factors.relative_error < 1e-14 and direct_error(W, factors) < 1e-14


@pytest.mark.parametrize("n", [2, 4, 8])
def test_projection_onto_an_algebra_rule_is_exact_for_a_matrix_of_that_algebra(n):
    rule = multiplication_rule(n)
    S = torch.randn(n, 3, 5, dtype=F64, generator=generator(n))
    factors = nearest_with_rule(kronecker_sum(rule, S), rule)
    assert factors.relative_error < 1e-14
    torch.testing.assert_close(factors.S, S, rtol=0, atol=1e-12)
    torch.testing.assert_close(factors.A, rule)


def test_quaternion_projection_is_the_mean_of_signed_blocks_and_least_squares():
    rule = multiplication_rule(4)
    W = torch.randn(12, 20, dtype=F64, generator=generator(7))
    factors = nearest_with_rule(W, rule)
    blocks = W.reshape(4, 3, 4, 5).transpose(1, 2)  # blocks[r, c]
    mean_of_signed_blocks = torch.einsum("irc,rcpq->ipq", rule, blocks) / 4
    torch.testing.assert_close(factors.S, mean_of_signed_blocks, rtol=0, atol=1e-12)
    assert factors.relative_error == pytest.approx(direct_error(W, factors), rel=1e-12)
    # least squares: the residual is orthogonal to every matrix of Hamilton structure
    residual = W - factors.weight()
    for i in range(4):
        component = torch.zeros(4, 3, 5, dtype=F64)
        component[i] = torch.randn(3, 5, dtype=F64, generator=generator(i))
        assert abs(float((residual * kronecker_sum(rule, component)).sum())) < 1e-12
    # a fixed rule can only be farther than the free optimum with the same n
    assert factors.relative_error >= nearest_kronecker_sum(W, 4).relative_error


def test_fit_into_layers_of_every_rule():
    W, b = torch.randn(16, 8, generator=generator(8)), torch.randn(16, generator=generator(9))
    x = torch.randn(3, 8, generator=generator(10))
    for layer in (
        PHMLinear(8, 16, n=4),
        PHMLinear(8, 16, n=4, rule="algebra-init"),
        PHMLinear(8, 16, n=4, rule="algebra-frozen"),
        QuaternionLinear(8, 16),
    ):
        factors = fit_phm_layer(layer, W, b)
        if layer.rule == "learned":
            expected = nearest_kronecker_sum(W, 4)
        else:
            expected = nearest_with_rule(W, multiplication_rule(4))
        assert factors.relative_error == pytest.approx(expected.relative_error, rel=1e-6)
        torch.testing.assert_close(layer.weight, expected.weight(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(layer(x), x @ expected.weight().T + b, rtol=1e-5, atol=1e-5)
    dense_layer = PHMLinear(8, 16, n=1)
    fit_phm_layer(dense_layer, W, b)
    assert torch.equal(dense_layer.weight, W) and torch.equal(dense_layer.bias, b)


def test_a_low_rank_layer_gets_the_nearest_rank_r_factors_of_each_s_i():
    W, b = torch.randn(16, 32, generator=generator(12)), torch.randn(16, generator=generator(13))
    full = nearest_kronecker_sum(W, 2)
    for rank in (1, 3, 8, 20):  # 8 = min(16/2, 32/2): exact; 20: more than S_i has
        layer = PHMLinear(32, 16, n=2, rank=rank)
        factors = fit_phm_layer(layer, W, b)
        A, S = layer.kronecker_factors()
        for i in range(2):  # Eckart-Young for each S_i
            sigma = torch.linalg.svdvals(full.S[i].double())
            residual = (full.S[i].double() - S[i].double()).norm()
            torch.testing.assert_close(residual, sigma[rank:].square().sum().sqrt(), atol=1e-5, rtol=1e-4)
        direct = float((W - kronecker_sum(A, S)).norm() / W.norm())
        assert factors.relative_error == pytest.approx(direct, rel=1e-5)
        assert factors.relative_error >= full.relative_error - 1e-6
        if rank >= 8:
            assert factors.relative_error == pytest.approx(full.relative_error, rel=1e-4)


def test_layer_refuses_factors_that_do_not_fit():
    W = torch.randn(16, 8, generator=generator(11))
    with pytest.raises(ValueError, match=r"A \(2, 2, 2\), S \(2, 8, 4\) do not fit the layer 8->16 \(n=4\)"):
        load_kronecker_factors(PHMLinear(8, 16, n=4), nearest_kronecker_sum(W, 2))
    with pytest.raises(ValueError, match=r"rule \(algebra-frozen\) is frozen .* nearest_with_rule\(weight, layer.A\)"):
        load_kronecker_factors(QuaternionLinear(8, 16, bias=False), nearest_kronecker_sum(W, 4))
    with pytest.raises(ValueError, match="the layer has bias, but none was given"):
        load_kronecker_factors(PHMLinear(8, 16, n=4), nearest_kronecker_sum(W, 4))
    with pytest.raises(ValueError, match=r"shape \(8, 16\) cannot be fitted into a layer of shape \(16, 8\)"):
        fit_phm_layer(PHMLinear(8, 16, n=4), W.T, None)


def test_bad_input_is_refused():
    with pytest.raises(
        ValueError,
        match=r"n=3 must divide both in_features=8 and out_features=16; "
        r"n can be one of \[1, 2, 4, 8\]",
    ):
        nearest_kronecker_sum(torch.randn(16, 8), 3)
    with pytest.raises(ValueError, match=r"2-D, got shape \(16,\)"):
        nearest_kronecker_sum(torch.randn(16), 4)
    with pytest.raises(ValueError, match=r"a PHM rule A has shape \(n, n, n\), got \(4, 4\)"):
        nearest_with_rule(torch.randn(16, 8), torch.eye(4))


# --- phm-compress on tiny trained checkpoints ------------------------------------------------

TINY_SIZES = dict(zip(TINY_FLAGS[::2], TINY_FLAGS[1::2]))  # the sizes as flags: phm-compress must be told them


def phm_compress(*argv):
    """phm-compress in this process (fairseq is imported once): (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = compress_cli.main([str(a) for a in argv])
        except SystemExit as exit:  # argparse's refusals
            code = exit.code
    return code, out.getvalue(), err.getvalue()


def compressed(dense, out, *flags):
    code, stdout, stderr = phm_compress(dense, "--out", out, *TINY_FLAGS, *flags, "--json")
    assert code == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def dense_twin(copy_models):
    """The dense twin trained on the copy task (conftest): its checkpoint, which the tests only read."""
    return copy_models["dense-twin"][0]


@pytest.fixture(scope="module")
def phm_twins(dense_twin, tmp_path_factory):
    """The dense twin compressed to PHM n = 1, 2, 4: {n: (checkpoint, report)}."""
    root = tmp_path_factory.mktemp("phm_twins")
    return {
        n: (
            root / f"phm_n{n}.pt",
            compressed(dense_twin, root / f"phm_n{n}.pt", "--arch", "phm_transformer_demo", "--phm-n", n),
        )
        for n in (1, 2, 4)
    }


def load(checkpoint, data, split="test"):
    from fairseq import checkpoint_utils

    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)}
    )
    task.load_dataset(split)
    return models[0].eval(), task


def training_loss(checkpoint, data, split="valid"):
    """fairseq-train's loss (label-smoothed cross-entropy 0.1, bits per token) on a whole split."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    model, task = load(checkpoint, data, split)
    dataset = task.dataset(split)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    with torch.no_grad():
        lprobs = model.get_normalized_probs(model(**batch["net_input"]), log_probs=True)
    loss, _ = label_smoothed_nll_loss(
        lprobs.view(-1, lprobs.size(-1)), batch["target"].view(-1), 0.1, ignore_index=task.target_dictionary.pad()
    )
    return float(loss) / batch["ntokens"] / math.log(2)


@pytest.mark.slow
def test_errors_and_parameter_counts_in_the_report(phm_twins):
    errors = {n: report["relative_error"] for n, (_, report) in phm_twins.items()}
    assert errors[1] < 1e-6 and 0 < errors[2] < errors[4] < 1, errors
    for n, (_, report) in phm_twins.items():
        names = [layer["name"] for layer in report["layers"]]
        # fused Q/K/V in self-attention (the paper's PHM), separate in the decoder's cross-attention
        assert "encoder.layers.0.self_attn.qkv_proj" in names and "decoder.layers.0.encoder_attn.q_proj" in names
        assert len(names) == 12
        assert all(layer["n"] == n and layer["kind"] == "PHM learned" for layer in report["layers"])
        counts = report["parameters"]
        assert counts["dense"]["without_embeddings"] == transformer_body(32, 64, 1)
        a_of_n1 = len(names) if n == 1 else 0  # the formula leaves out n=1's 1 x 1 x 1 A
        assert counts["compressed"]["without_embeddings"] == transformer_body(32, 64, 1, n=n) + a_of_n1
        assert counts["compressed"]["embeddings"] == counts["dense"]["embeddings"]


@pytest.mark.slow
def test_n1_generates_exactly_what_the_dense_model_generates(dense_twin, phm_twins, copy_task):
    def generate(checkpoint):
        out = fairseq_generate(copy_task, checkpoint, "--batch-size", "32")
        return [line for line in out.stdout.splitlines() if line.startswith(("H-", "P-"))]

    dense = generate(dense_twin)
    assert sorted(hypotheses("\n".join(dense))) == list(range(64))
    assert generate(phm_twins[1][0]) == dense  # hypotheses and their scores, token by token


@pytest.mark.slow
def test_outputs_approach_the_dense_models_as_n_falls(dense_twin, phm_twins, copy_task):
    def log_probs(checkpoint):
        model, task = load(checkpoint, copy_task)
        dataset = task.dataset("test")
        batch = dataset.collater([dataset[i] for i in range(len(dataset))])
        with torch.no_grad():
            logits = model(**batch["net_input"])[0]
        return torch.log_softmax(logits.double(), dim=-1)[batch["target"].ne(task.target_dictionary.pad())]

    dense = log_probs(dense_twin)
    kl = {
        n: float((dense.exp() * (dense - log_probs(checkpoint))).sum(-1).mean())
        for n, (checkpoint, _) in phm_twins.items()
    }
    assert kl[1] < 1e-9 and kl[1] < kl[2] < kl[4], kl


@pytest.fixture(scope="module")
@slow
def fresh_phm_n2(copy_task, tmp_path_factory):
    """A PHM n=2 model trained from scratch as long as the fine-tuning below: the baseline."""
    result = train(
        copy_task,
        tmp_path_factory.mktemp("fresh"),
        "--arch",
        "phm_transformer_demo",
        "--phm-n",
        "2",
        "--max-update",
        "40",
        "--log-interval",
        "1",
        "--no-save",
    )
    return result.stdout + result.stderr


@pytest.mark.slow
def test_fairseq_train_fine_tunes_the_compressed_model(phm_twins, fresh_phm_n2, copy_task, tmp_path):
    checkpoint, report = phm_twins[2]
    # the fine-tuning command: the dense model's, with the flags that the report names
    result = train(
        copy_task,
        tmp_path / "finetune",
        *report["model_flags"],
        "--finetune-from-model",
        checkpoint,
        "--max-update",
        "40",
        "--log-interval",
        "1",
        "--no-save",
    )
    log = result.stdout + result.stderr
    assert f"loading pretrained model from {checkpoint}" in log
    tuned, fresh = losses(log), losses(fresh_phm_n2)
    tuned_valid, fresh_valid = losses(log, tag="valid"), losses(fresh_phm_n2, tag="valid")
    # It starts from the compressed model (trained embeddings, layer norms, the nearest PHM
    # weights): its first batch's loss is the compressed model's loss, up to the batch, and
    # not a random model's; in 40 updates it gets far below training from scratch.
    start = training_loss(checkpoint, copy_task)
    assert abs(tuned[0] - start) < 0.3 and fresh[0] > start + 0.8, (tuned[0], start, fresh[0])
    assert tuned_valid[-1] < tuned_valid[0] and tuned_valid[-1] < fresh_valid[-1] - 1.0, (tuned_valid, fresh_valid)
    # --restore-file with every --reset-* flag loads the same weights: the same first loss
    restored = train(
        copy_task,
        tmp_path / "restore",
        *report["model_flags"],
        "--restore-file",
        checkpoint,
        "--reset-optimizer",
        "--reset-lr-scheduler",
        "--reset-meters",
        "--reset-dataloader",
        "--max-update",
        "1",
        "--log-interval",
        "1",
        "--no-save",
    )
    assert losses(restored.stdout + restored.stderr)[0] == tuned[0]


@pytest.mark.slow
def test_the_command_prints_the_table_and_the_fine_tuning_flags(dense_twin, tmp_path):
    out = run_main(
        compress_cli.main,
        dense_twin,
        "--arch",
        "quaternion_transformer_demo",
        "--qkv-projection",
        "fused",
        *TINY_FLAGS,
        "--out",
        tmp_path / "quaternion.pt",
    )
    table = out.stdout
    assert re.search(r"encoder\.layers\.0\.self_attn\.qkv_proj\s+96 x 32\s+4\s+quaternion\s+0\.\d{4}", table), table
    quaternion_body = transformer_body(32, 64, 1, quaternion=True)
    assert re.search(rf"without embeddings\s+21,376\s+{quaternion_body:,}\s", table), table
    flags = re.search(r"fairseq-train command with (.*) \(and --user-dir", table).group(1).split()
    expected = ["--arch", "quaternion_transformer_demo", "--qkv-projection", "fused", *TINY_FLAGS]
    assert dict(zip(flags[::2], flags[1::2])) == dict(zip(expected[::2], expected[1::2])), table
    assert (tmp_path / "quaternion.pt").is_file()


# --- fairseq's own transformer ----------------------------------------------------------------


@pytest.fixture(scope="module")
@slow
def dense_fairseq(copy_task, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("dense_fairseq")
    train(copy_task, save_dir, "--arch", "transformer", "--max-update", "5")
    return save_dir / "checkpoint_last.pt"


@pytest.mark.slow
def test_fairseq_transformer_compresses_to_the_plugins_models(dense_fairseq, copy_task, tmp_path):
    dense, task = load(dense_fairseq, copy_task)
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(8)])["net_input"]
    with torch.no_grad():
        expected = dense(**batch)[0]

    compressed(dense_fairseq, tmp_path / "n1.pt", "--arch", "phm_transformer_demo", "--phm-n", "1")
    model, _ = load(tmp_path / "n1.pt", copy_task)
    with torch.no_grad():
        torch.testing.assert_close(model(**batch)[0], expected, rtol=0, atol=0)

    report = compressed(dense_fairseq, tmp_path / "partial.pt", "--arch", "quaternion_transformer_partial_demo")
    assert {layer["kind"] for layer in report["layers"]} == {"quaternion"}
    assert not any(".fc" in layer["name"] for layer in report["layers"])
    model, _ = load(tmp_path / "partial.pt", copy_task)
    dense_state = dense.state_dict()
    for key, value in model.state_dict().items():
        if key.endswith(".S"):  # a quaternion layer: the least-squares components of the dense weight
            expected = nearest_with_rule(dense_state[key[: -len("S")] + "weight"], multiplication_rule(4)).S
            torch.testing.assert_close(value, expected, rtol=0, atol=1e-7)
        else:  # everything else, the feed-forward layers and the biases included, is copied exactly
            assert torch.equal(value, dense_state[key]), key


# --- refusals -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_low_rank_target_loads_in_fairseq_with_its_reported_error(dense_twin, phm_twins, copy_task, tmp_path):
    out = tmp_path / "phm_n2_rank2.pt"
    report = compressed(dense_twin, out, "--arch", "phm_transformer_demo", "--phm-n", "2", "--phm-rank", "2")
    assert all(layer["kind"] == "PHM learned, rank 2" for layer in report["layers"])
    full = {layer["name"]: layer["relative_error"] for layer in phm_twins[2][1]["layers"]}
    assert all(layer["relative_error"] >= full[layer["name"]] - 1e-6 for layer in report["layers"])
    model, _task = load(out, copy_task)
    layer = model.encoder.layers[0].fc1
    assert layer.rank == 2 and layer.S is None and layer.S_left.shape == (2, 32, 2)


def refused(*argv, message, out=None):
    code, stdout, stderr = phm_compress(*argv)
    assert code == 2 and re.search(message, stderr), stderr[-2000:]
    assert out is None or not out.exists(), "nothing was written"


def test_a_missing_or_foreign_file_is_refused(tmp_path):
    out = tmp_path / "out.pt"
    args = ("--arch", "phm_transformer_demo", "--out", out)
    refused(tmp_path / "nowhere.pt", *args, message=r"nowhere.pt: no such checkpoint file", out=out)
    (tmp_path / "text.pt").write_text("not a checkpoint\n")
    refused(tmp_path / "text.pt", *args, message=r"text.pt cannot be read as a fairseq checkpoint", out=out)
    torch.save({"weights": torch.zeros(3)}, tmp_path / "tensors.pt")
    refused(tmp_path / "tensors.pt", *args, message=r"not a fairseq training checkpoint", out=out)


def test_an_out_that_cannot_be_written_is_refused_before_the_work(tmp_path):
    (tmp_path / "file").write_text("")
    for out, message in [
        ("", r"--out is empty: name the checkpoint file to write"),
        (f"{tmp_path}/new/", r"new/ is a directory: name the checkpoint file to write"),
        (tmp_path / "file" / "phm.pt", r"file is a file, not a directory"),
    ]:
        refused(tmp_path / "nowhere.pt", "--arch", "phm_transformer_demo", "--out", out, message=message)
    assert os.listdir(tmp_path) == ["file"]


@pytest.mark.slow
def test_a_checkpoint_of_another_task_or_model_is_refused(dense_twin, phm_twins, tmp_path):
    out = tmp_path / "out.pt"
    state = torch.load(dense_twin, weights_only=True)
    state["cfg"]["task"]["_name"] = "nli"
    state["cfg"]["model"].arch = state["cfg"]["model"]._name = "phm_lstm_nli"
    torch.save(state, tmp_path / "nli.pt")
    refused(
        tmp_path / "nli.pt",
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        *TINY_FLAGS,
        message=r"holds a model for task 'nli' \(arch 'phm_lstm_nli'\); phm-compress compresses translation",
        out=out,
    )
    refused(
        phm_twins[4][0],
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        *TINY_FLAGS,
        message=r"holds a '\w+' model \(arch 'phm_transformer_demo'\); phm-compress takes a dense Transformer: "
        r"the plugin's dense twin \(transformer_twin_\*\) or fairseq's transformer",
        out=out,
    )


@pytest.mark.slow
def test_other_sizes_are_refused_with_both_and_the_matching_architecture(dense_twin, tmp_path):
    out = tmp_path / "out.pt"
    refused(
        dense_twin,
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        message=r"has other sizes than phm_transformer_demo: --encoder-layers 1 against 2, --encoder-embed-dim 32 "
        r"against 128, .* No phm architecture has them: give them with the architecture "
        r"\(--arch phm_transformer_demo --encoder-layers 1 --encoder-embed-dim 32 ",
        out=out,
    )
    refused(
        dense_twin,
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        *TINY_FLAGS[:-2],
        "--decoder-attention-heads",
        "4",
        message=r"--decoder-attention-heads 2 against 4\.",
        out=out,
    )
    demo = argparse.Namespace(
        arch="transformer_twin_demo", **{key: value for key, value in zip(compress_cli.SIZE_KEYS, [2, 128, 512, 4] * 2)}
    )
    with pytest.raises(compress_cli.CompressionError, match=r"phm_transformer_demo has the checkpoint's sizes; or"):
        compress_cli.check_sizes("demo.pt", demo, "phm_transformer_iwslt", {})
    compress_cli.check_sizes("demo.pt", demo, "phm_transformer_demo", {})  # the same sizes pass


def test_the_model_flags_are_the_models_declarations():
    """phm-compress declares none of the target's flags itself: each is the models' own (linear_args.py),
    with only what phm-compress changes on purpose; every model flag is either taken or refused."""
    from phm_fairseq.models import linear_args

    declared = {**linear_args.LINEAR_FLAGS, **linear_args.TRANSFORMER_FLAGS}
    training = {"--rule-lr-scale", "--factor-lr-scale", "--no-rule-decay", "--no-factor-decay", "--log-parameter-stats"}
    refused = {"--linear-kind", "--phm-shared-rule", "--phydi", "--fused-qkv-init", *training}  # fairseq-train's
    assert set(declared) - set(compress_cli.HONOURED) == refused
    actions = {option: action for action in compress_cli.build_parser()._actions for option in action.option_strings}
    for flag in compress_cli.HONOURED:
        action, declaration = actions[flag], declared[flag]
        assert action.dest == linear_args.dest(flag)
        assert (action.type, action.choices, action.metavar, action.nargs) == (
            declaration.get("type"),
            declaration.get("choices"),
            declaration.get("metavar"),
            0 if declaration.get("action") == "store_true" else None,
        )
        assert action.default is None  # not given: the architecture decides
        assert action.help.startswith(declaration["help"]) or action.help == argparse.SUPPRESS
    assert set(compress_cli.HYPERCOMPLEX_KEYS) == {linear_args.dest(flag) for flag in declared}
    assert compress_cli.build_parser().get_default("dense_ffn") is None
    assert compress_cli.parse_args(["d.pt", "--arch", "a", "--out", "o", "--dense-ffn"]).dense_ffn is True


def test_the_plugin_folder_is_one_path():
    import phm_fairseq
    from phm_experiments import commands

    assert phm_fairseq.PLUGIN_DIR in phm_fairseq.__path__  # what fairseq's --user-dir check compares
    assert compress_cli.PLUGIN_DIR is phm_fairseq.PLUGIN_DIR
    assert commands.fairseq_train_command("DATA")[-4:-2] == ["--user-dir", phm_fairseq.PLUGIN_DIR]
    assert commands.fairseq_generate_command("DATA", "c.pt")[2:4] == ["--user-dir", phm_fairseq.PLUGIN_DIR]


@pytest.mark.slow
def test_bad_flags_are_refused(dense_twin, tmp_path):
    out = tmp_path / "out.pt"
    for flags, message in [
        (
            ["--arch", "phm_transformer_demo", "--phm-n", "3"],
            r"--phm-n 3 must divide every feature size of the model, but does not divide --encoder-embed-dim 32",
        ),
        (["--arch", "phm_transformer_demo", "--dropout", "0.1"], r"cannot honour --dropout 0.1: phm-compress sets"),
        (
            ["--arch", "phm_transformer_demo", "--phm-shared-rule", "model"],
            r"cannot honour --phm-shared-rule model: .*a shared rule \(one A for many layers\) is not fitted",
        ),
        (["--arch", "quaternion_transformer_demo", "--phm-rank", "2"], r"--phm-rank applies to phm_transformer"),
        (
            ["--arch", "quaternion_transformer_demo", "--quaternion-attention"],
            r"--quaternion-attention cannot be honoured: .* no weights approximate it",
        ),
        (["--arch", "quaternion_transformer_demo", "--phm-n", "4"], r"--phm-n applies to phm_transformer archit"),
        (["--arch", "transformer_twin_demo"], r"transformer_twin_demo is a dense architecture; phm-compress writes"),
        (["--arch", "no_such_arch"], r"--arch no_such_arch is not a translation Transformer architecture"),
        (["--arch", "phm_transformer_classifier"], r"phm_transformer_classifier is not a translation Transformer"),
    ]:
        refused(dense_twin, *flags, "--out", out, *TINY_FLAGS, message=message, out=out)


@pytest.mark.slow
def test_existing_output_and_moved_data(dense_twin, copy_task, tmp_path):
    out = tmp_path / "phm.pt"
    out.write_bytes(b"keep me")
    refused(
        dense_twin, "--arch", "phm_transformer_demo", "--out", out, *TINY_FLAGS, message=r"phm.pt exists: pass --force"
    )
    assert out.read_bytes() == b"keep me"
    refused(
        dense_twin,
        "--arch",
        "phm_transformer_demo",
        "--out",
        dense_twin,
        "--force",
        *TINY_FLAGS,
        message=r"is the dense checkpoint itself",
    )
    state = torch.load(dense_twin, weights_only=True)
    state["cfg"]["task"]["data"] = str(tmp_path / "moved")
    torch.save(state, tmp_path / "moved.pt")
    out.unlink()
    refused(
        tmp_path / "moved.pt",
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        *TINY_FLAGS,
        message=r"data directory '.*moved' does not exist here: pass --data DIR",
        out=out,
    )
    refused(
        tmp_path / "moved.pt",
        "--arch",
        "phm_transformer_demo",
        "--out",
        out,
        *TINY_FLAGS,
        "--data",
        tmp_path / "gone",
        message=r"--data .*gone: no such directory",
        out=out,
    )
    compressed(tmp_path / "moved.pt", out, "--arch", "phm_transformer_demo", "--data", copy_task)
    written = torch.load(out, weights_only=True)
    assert written["cfg"]["task"]["data"] == str(copy_task) and "last_optimizer_state" not in written
    assert classes_in_checkpoint(out) == ["argparse.Namespace"]  # torch and fairseq alone open it


# --- the mapping itself, on models built in this process (random weights suffice) -------------


def build(copy_task, *flags):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(), input_args=[str(copy_task), "--task", "translation", *TINY_FLAGS, *flags]
    )
    task = tasks.setup_task(args)
    return task.build_model(args).eval(), task


@pytest.mark.parametrize("dense_qkv,target_qkv", [("fused", "separate"), ("separate", "fused"), ("fused", "fused")])
def test_n1_keeps_the_function_whichever_qkv_layout_either_side_has(copy_task, dense_qkv, target_qkv):
    from phm_fairseq.models.compress import compress_into

    torch.manual_seed(0)
    dense, task = build(copy_task, "--arch", "transformer_twin_demo", "--qkv-projection", dense_qkv)
    target, _ = build(copy_task, "--arch", "phm_transformer_demo", "--phm-n", "1", "--qkv-projection", target_qkv)
    report = compress_into(dense, target)
    assert max(layer.relative_error for layer in report) == 0.0
    task.load_dataset("test")
    dataset = task.dataset("test")
    batch = dataset.collater([dataset[i] for i in range(8)])["net_input"]
    with torch.no_grad():
        torch.testing.assert_close(target(**batch)[0], dense(**batch)[0], rtol=1e-6, atol=1e-6)


def test_models_that_do_not_correspond_one_to_one_are_refused(copy_task):
    from phm_fairseq.models.compress import CompressionError, compress_into

    dense, _ = build(copy_task, "--arch", "transformer_twin_demo", "--encoder-layers", "2")
    target, _ = build(copy_task, "--arch", "phm_transformer_demo", "--phm-n", "2")
    # the dense model's second encoder layer has no place in the target: it would be left out
    with pytest.raises(
        CompressionError,
        match=r"do not correspond one to one: the dense model's "
        r"encoder.layers.1.self_attn.k_proj.weight, .* and 12 more would be "
        r"left out$",
    ):
        compress_into(dense, target)


def test_phydi_is_refused_rather_than_left_to_the_fine_tuning_that_cannot_load_the_result(copy_task, tmp_path):
    """--phydi adds parameters (the residual gates): a compressed checkpoint has none, so the flag cannot be
    passed on to fine-tuning as the training options can; phm-compress says so, and writes nothing."""
    from phm_fairseq.models.compress import compress_into

    out = tmp_path / "out.pt"
    for flags in (["--phydi"], ["--phydi", "--dropout", "0.1"], ["--dropout", "0.1", "--phydi"]):
        code, _, stderr = phm_compress("dense.pt", "--arch", "phm_transformer_demo", *flags, "--out", out)
        assert code == 2 and "cannot honour --phydi: PHYDI adds a residual_gate parameter" in stderr, stderr
        assert "Compress and fine-tune without --phydi" in stderr
        assert "give training options to fairseq-train" not in stderr, stderr  # i.e. not: pass it when fine-tuning
    assert not out.exists()
    # what the refusal says: the compressed model's parameters do not load into a --phydi model
    dense, _ = build(copy_task, "--arch", "transformer_twin_demo")
    target, _ = build(copy_task, "--arch", "phm_transformer_demo", "--phm-n", "2")
    compress_into(dense, target)
    gated, _ = build(copy_task, "--arch", "phm_transformer_demo", "--phm-n", "2", "--phydi")
    with pytest.raises(RuntimeError, match=r"Missing key\(s\) in state_dict: .*residual_gate"):
        gated.load_state_dict(target.state_dict(), strict=True)


@pytest.mark.slow
def test_kronecker_structure_script_rebuilds_the_initial_weights(copy_task, tmp_path, capsys):
    """scripts/kronecker_structure.py compares a run's weights with their initialisation, which
    it rebuilds from the run's command: a run whose one update has learning rate 0 kept them."""
    import importlib.util
    import shlex

    from conftest import REPO

    spec = importlib.util.spec_from_file_location("kronecker_structure", REPO / "scripts" / "kronecker_structure.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)

    flags = ("--arch", "transformer_twin_demo", "--max-update", "1", "--lr", "0", "--lr-scheduler", "fixed")
    run = tmp_path / "run"
    result = train(copy_task, run / "checkpoints", *flags)
    command = shlex.join(map(str, result.args))
    (run / "result.json").write_text(json.dumps({"training": {"command": command}}))

    trained = torch.load(run / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False)["model"]
    init = script.initial_state(command)
    keys = script.layer_weights(trained)
    # encoder: q, k, v, out, fc1, fc2; decoder: the same and the encoder attention's q, k, v, out
    assert len(keys) == 6 + 10
    for key in keys:
        torch.testing.assert_close(init[key], trained[key], rtol=0, atol=0, msg=key)
    # a different seed builds other weights: the match above is not a coincidence of init
    other = script.initial_state(command.replace("--seed 1", "--seed 2"))
    assert not torch.equal(other[keys[0]], trained[keys[0]])

    script.main([str(run), "--checkpoint", "checkpoints/checkpoint_last.pt", "--n", "1", "2"])
    out = capsys.readouterr().out
    assert "|W - W0| / |W| = 0.000" in out
    rows = [line.split() for line in out.splitlines()[2:]]
    assert [row[0] for row in rows] == ["1", "2"] and rows[0][1:3] == ["0.000", "0.000"]
    assert 0 < float(rows[1][1]) == float(rows[1][2]) < 1  # W = W0: the same error; n = 1 exact
    assert rows[0][3] == rows[1][3] == "nan"  # W - W0 = 0 has no relative error


def test_an_interrupted_write_leaves_neither_the_file_nor_a_partial_one(tmp_path):
    from phm_fairseq.cli.checkpoint_files import written_in_place

    out = tmp_path / "models" / "phm.pt"
    for interruption in (KeyboardInterrupt, SystemExit):  # Ctrl-C; SIGTERM, made an exit
        with pytest.raises(interruption):
            with written_in_place(str(out)) as partial:
                torch.save({"weights": torch.zeros(1000)}, partial)
                raise interruption()
        assert list(tmp_path.iterdir()) == []  # neither the file nor the folder made for it
    with written_in_place(str(out)) as partial:
        torch.save({"weights": torch.ones(3)}, partial)
    assert torch.equal(torch.load(out)["weights"], torch.ones(3)) and [p.name for p in out.parent.iterdir()] == [
        "phm.pt"
    ]


def test_sigterm_while_writing_leaves_nothing(tmp_path):
    import signal
    import subprocess
    import sys

    program = (
        "import os, signal, sys\n"
        "from phm_fairseq.cli.checkpoint_files import written_in_place\n"
        "with written_in_place(sys.argv[1]) as partial:\n"
        "    open(partial, 'w').write('half')\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    signal.pause()\n"
    )
    out = tmp_path / "phm.pt"
    result = subprocess.run([sys.executable, "-c", program, str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 128 + signal.SIGTERM and list(tmp_path.iterdir()) == []
