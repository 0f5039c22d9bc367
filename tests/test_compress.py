"""The nearest PHM model to a dense one: the decomposition (phm_fairseq.modules) and phm-compress."""

import math

import pytest
import torch

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
    optimizer = torch.optim.LBFGS([A, S], max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15,
                                  line_search_fn="strong_wolfe")

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
    for layer in (PHMLinear(8, 16, n=4), PHMLinear(8, 16, n=4, rule="algebra-init"),
                  PHMLinear(8, 16, n=4, rule="algebra-frozen"), QuaternionLinear(8, 16)):
        factors = fit_phm_layer(layer, W, b)
        expected = nearest_kronecker_sum(W, 4) if layer.rule == "learned" else nearest_with_rule(W, multiplication_rule(4))
        assert factors.relative_error == pytest.approx(expected.relative_error, rel=1e-6)
        torch.testing.assert_close(layer.weight, expected.weight(), rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(layer(x), x @ expected.weight().T + b, rtol=1e-5, atol=1e-5)
    dense_layer = PHMLinear(8, 16, n=1)
    fit_phm_layer(dense_layer, W, b)
    assert torch.equal(dense_layer.weight, W) and torch.equal(dense_layer.bias, b)


def test_layer_refuses_factors_that_do_not_fit():
    W = torch.randn(16, 8, generator=generator(11))
    with pytest.raises(ValueError, match=r"factors with A \(2, 2, 2\), S \(2, 8, 4\) do not fit the layer 8->16 \(n=4\)"):
        load_kronecker_factors(PHMLinear(8, 16, n=4), nearest_kronecker_sum(W, 2))
    with pytest.raises(ValueError, match=r"rule \(algebra-frozen\) is frozen .* nearest_with_rule\(weight, layer.A\)"):
        load_kronecker_factors(QuaternionLinear(8, 16, bias=False), nearest_kronecker_sum(W, 4))
    with pytest.raises(ValueError, match="the layer has bias, but none was given"):
        load_kronecker_factors(PHMLinear(8, 16, n=4), nearest_kronecker_sum(W, 4))
    with pytest.raises(ValueError, match=r"a weight of shape \(8, 16\) cannot be fitted into a layer of shape \(16, 8\)"):
        fit_phm_layer(PHMLinear(8, 16, n=4), W.T, None)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match=r"n=3 must divide both in_features=8 and out_features=16; n can be one of \[1, 2, 4, 8\]"):
        nearest_kronecker_sum(torch.randn(16, 8), 3)
    with pytest.raises(ValueError, match=r"2-D, got shape \(16,\)"):
        nearest_kronecker_sum(torch.randn(16), 4)
    with pytest.raises(ValueError, match=r"a PHM rule A has shape \(n, n, n\), got \(4, 4\)"):
        nearest_with_rule(torch.randn(16, 8), torch.eye(4))
