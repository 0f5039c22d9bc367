"""Training by kind of parameter (phm_fairseq.modules.parameter_groups): lr and weight-decay scales of the
rules A and the factors S as optimizer parameter groups, and statistics by kind around each step."""

import copy
import math
import pickle
from pathlib import Path

import pytest
import torch
from fairseq.optim.adam import Adam as FairseqAdamKernel
from fairseq.optim.adam import FairseqAdam, FairseqAdamConfig
from torch import nn

from phm_fairseq.modules import LinearSpec, PHMLinear
from phm_fairseq.modules.parameter_groups import (
    ParameterStatistics,
    factor_scales,
    param_groups,
    parameters_by_kind,
    scales_of,
)

OPTIMIZERS = {
    "torch Adam": lambda params, lr, wd: torch.optim.Adam(params, lr=lr, weight_decay=wd),
    "torch AdamW": lambda params, lr, wd: torch.optim.AdamW(params, lr=lr, weight_decay=wd),
    "fairseq Adam": lambda params, lr, wd: FairseqAdamKernel(params, lr=lr, weight_decay=wd),
    "SGD": lambda params, lr, wd: torch.optim.SGD(params, lr=lr, weight_decay=wd),
}


def two_steps(spec: LinearSpec, make_optimizer, lr=1e-2, wd=0.0, seed=0, steps=2):
    """A PHM layer built from ``spec`` and ``steps`` optimizer steps on a fixed loss: its (A, S) before and after."""
    torch.manual_seed(seed)
    layer = spec.build(16, 24)
    x = torch.randn(32, 16)
    optimizer = make_optimizer(param_groups(layer, lr, wd), lr, wd)
    before = (layer.A.detach().clone(), layer.S.detach().clone())
    for _ in range(steps):
        optimizer.zero_grad()
        layer(x).square().mean().backward()
        optimizer.step()
    return optimizer, before, (layer.A.detach().clone(), layer.S.detach().clone())


@pytest.mark.parametrize("name", ["torch Adam", "torch AdamW", "fairseq Adam"])
def test_a_rule_lr_scale_scales_the_rules_step_under_adam_and_leaves_the_factors(name):
    plain = LinearSpec("phm", n=4)
    _, (A0, S0), (A1, S1) = two_steps(plain, OPTIMIZERS[name], steps=1)
    _, (B0, T0), (B1, T1) = two_steps(LinearSpec("phm", n=4, rule_lr_scale=10), OPTIMIZERS[name], steps=1)
    assert torch.equal(A0, B0) and torch.equal(S0, T0)  # the same start: scales change no initialisation
    # Adam's step is lr * m / sqrt(v) (+ eps): independent of the gradient's scale, so on the same gradients
    # 10 x the lr moves A 10 x as far, and S as before
    torch.testing.assert_close(B1 - B0, 10 * (A1 - A0))
    torch.testing.assert_close(T1 - T0, S1 - S0)
    assert (A1 - A0).abs().max() > 0.5e-2


def test_a_factor_lr_scale_under_sgd_is_the_lr_times_the_scale():
    _, (A0, S0), _ = two_steps(LinearSpec("phm", n=4), OPTIMIZERS["SGD"])
    torch.manual_seed(0)
    layer = LinearSpec("phm", n=4, factor_lr_scale=0.25).build(16, 24)
    x = torch.randn(32, 16)
    optimizer = torch.optim.SGD(param_groups(layer, lr=0.1))
    layer(x).square().mean().backward()
    grad_S, grad_A, S, A = (
        layer.S.grad.clone(),
        layer.A.grad.clone(),
        layer.S.detach().clone(),
        layer.A.detach().clone(),
    )
    optimizer.step()
    torch.testing.assert_close(layer.S.detach(), S - 0.025 * grad_S)  # the group's lr x 0.25: a parameter group
    torch.testing.assert_close(layer.A.detach(), A - 0.1 * grad_A)


@pytest.mark.parametrize("name", ["torch AdamW", "fairseq Adam", "torch Adam", "SGD"])
def test_no_rule_decay_steps_the_rules_as_without_weight_decay(name):
    """Decoupled (AdamW, fairseq's Adam) or coupled (Adam, SGD): the group of A gets weight_decay 0."""
    no_decay = LinearSpec("phm", n=4, rule_decay=False)
    _, _, (A_plain, S_plain) = two_steps(LinearSpec("phm", n=4), OPTIMIZERS[name], wd=0.0, steps=1)
    _, _, (A_decayed, S_decayed) = two_steps(LinearSpec("phm", n=4), OPTIMIZERS[name], wd=0.5, steps=1)
    _, _, (A, S) = two_steps(no_decay, OPTIMIZERS[name], wd=0.5, steps=1)
    torch.testing.assert_close(A, A_plain)
    torch.testing.assert_close(S, S_decayed)
    assert not torch.allclose(A_decayed, A_plain)  # the decay is large enough to see


def test_fairseqs_optimizer_is_split_once_and_its_set_lr_keeps_each_groups_scale():
    """FairseqOptimizer.set_lr, which fairseq's lr schedulers call at each update, writes one lr into every
    group: the optimizer that fairseq's Trainer builds (one flat group) is split by scale once, its set_lr
    multiplies each group's lr_scale, its state_dict holds the groups, and a restored optimizer goes on
    bit for bit as the original, from a state saved split or (an earlier version's) as one group."""
    from phm_fairseq.models.training import prepare_optimizer

    torch.manual_seed(0)
    layer = LinearSpec("phm", n=4, rule_lr_scale=3, factor_decay=False).build(16, 24)
    cfg = FairseqAdamConfig(lr=[0.01], weight_decay=0.1, adam_betas="(0.9, 0.98)")
    x = torch.randn(8, 16)

    def build(split=True):
        optimizer = FairseqAdam(cfg, list(layer.parameters()))  # as fairseq-train builds it
        if split:
            prepare_optimizer(optimizer, layer)
        return optimizer

    def step(opt, lr):
        opt.set_lr(lr)  # what fairseq's lr schedulers call
        opt.zero_grad()
        layer(x).square().mean().backward()
        A = layer.A.detach().clone()
        opt.step()
        return layer.A.detach() - A

    optimizer = build()
    step(optimizer, 0.01)
    groups = optimizer.param_groups
    assert [(g["lr_scale"], g["weight_decay_scale"], g["lr"], g["weight_decay"]) for g in groups] == [
        (1.0, 1.0, 0.01, 0.1),
        (1.0, 0.0, 0.01, 0.0),
        (3.0, 1.0, 0.03, 0.1),
    ]
    assert optimizer.get_lr() == 0.01  # the unscaled group first: fairseq logs the scheduler's lr
    state = copy.deepcopy(optimizer.state_dict())
    assert [g["lr_scale"] for g in state["param_groups"]] == [1.0, 1.0, 3.0]
    snapshot = copy.deepcopy(layer.state_dict())
    moved = step(optimizer, 0.002)
    assert moved.abs().max() <= 3 * 0.002 * 1.2  # Adam moves by about lr x scale (bias-corrected: 1.05 x)
    assert moved.abs().max() > 2 * 0.002  # ... and here more than the unscaled lr would give
    after = copy.deepcopy(layer.state_dict())

    layer.load_state_dict(snapshot)
    restored = build()
    restored.load_state_dict(copy.deepcopy(state))  # torch steps the loaded state's tensors in place
    step(restored, 0.002)
    assert all(torch.equal(after[k], v) for k, v in layer.state_dict().items())

    # a state saved with one group (by an earlier version, or a run without scales): regrouped as it loads
    layer.load_state_dict(snapshot)
    restored = build()
    restored.load_state_dict(_one_group(state, layer))
    step(restored, 0.002)
    assert all(torch.equal(after[k], v) for k, v in layer.state_dict().items())


def _one_group(state, layer):
    """The split optimizer's ``state`` as an optimizer of one group of ``layer.parameters()`` saves it."""
    indices = [i for group in state["param_groups"] for i in group["params"]]
    split_order = [id(p) for group in param_groups(layer) for p in group["params"]]
    flat = [indices[split_order.index(id(p))] for p in layer.parameters()]
    group = {k: v for k, v in state["param_groups"][0].items() if k not in ("lr_scale", "weight_decay_scale")}
    return {
        "state": {new: state["state"][old] for new, old in enumerate(flat) if old in state["state"]},
        "param_groups": [{**group, "params": list(range(len(flat)))}],
    }


def test_an_optimizer_of_the_users_own_is_left_alone():
    """No hook of the plugin's: torch's LBFGS (which takes exactly one group) and any optimizer built from
    ``model.parameters()`` step every parameter with their one lr, scales or not (issue 58, item 9)."""
    torch.manual_seed(0)
    layer = LinearSpec("phm", n=4, rule_lr_scale=10).build(16, 24)
    x = torch.randn(8, 16)
    optimizer = torch.optim.LBFGS(layer.parameters(), max_iter=3)

    def closure():
        optimizer.zero_grad()
        loss = layer(x).square().mean()
        loss.backward()
        return loss

    first = closure().item()
    optimizer.step(closure)
    assert closure().item() < first and len(optimizer.param_groups) == 1
    sgd = torch.optim.SGD(layer.parameters(), lr=0.1)
    closure()
    A, grad = layer.A.detach().clone(), layer.A.grad.clone()
    sgd.step()
    torch.testing.assert_close(layer.A.detach(), A - 0.1 * grad)  # the lr itself: the scales are not applied


def _renewed(layer, how):
    """``layer`` after one of the ways PyTorch makes new Parameters for a module."""
    if how == "deepcopy":
        return copy.deepcopy(layer)
    if how == "meta, to_empty":
        with torch.device("meta"):
            built = LinearSpec("phm", n=4, rule_lr_scale=10, factor_decay=False).build(16, 24)
        return built.to_empty(device="cpu")
    if how == "load_state_dict(assign=True)":
        layer.load_state_dict({k: v.clone() for k, v in layer.state_dict().items()}, assign=True)
        return layer
    if how == "to meta":
        return layer.to("meta")
    if how == "overwrite on conversion":
        torch.__future__.set_overwrite_module_params_on_conversion(True)
        try:
            return layer.double()
        finally:
            torch.__future__.set_overwrite_module_params_on_conversion(False)
    raise AssertionError(how)


@pytest.mark.parametrize(
    "how", ["deepcopy", "meta, to_empty", "load_state_dict(assign=True)", "to meta", "overwrite on conversion"]
)
def test_the_scales_survive_every_way_pytorch_makes_new_parameters(how):
    """The scales live on the module, by parameter name (issue 58, item 4): a new Parameter object keeps them."""
    layer = _renewed(LinearSpec("phm", n=4, rule_lr_scale=10, factor_decay=False).build(16, 24), how)
    assert scales_of(layer, "A") == (10.0, 1.0) and scales_of(layer, "S") == (1.0, 0.0)
    by_scales = {(g["lr_scale"], g["weight_decay_scale"]): g["params"] for g in param_groups(layer)}
    assert [id(p) for p in by_scales[(10.0, 1.0)]] == [id(layer.A)]
    assert [id(p) for p in by_scales[(1.0, 0.0)]] == [id(layer.S)]


def test_balanced_scales_give_a_and_s_the_same_relative_first_adam_step():
    """'balanced': Adam's first step moves every entry by the lr, so a factor moves by lr / its rms; A's
    scale makes its relative step that of S (and of a dense weight, whose rms S shares)."""
    layer = PHMLinear(256, 768, n=4, gain=1 / math.sqrt(2))
    scales = factor_scales(layer, "balanced")
    relative = lambda tensor, scale: scale / tensor.square().mean().sqrt().item()  # noqa: E731
    assert relative(layer.A, scales["A"]) == pytest.approx(relative(layer.S, scales["S"]), rel=0.1)
    dense = nn.Linear(256, 768)
    nn.init.xavier_uniform_(dense.weight, gain=1 / math.sqrt(2))
    assert relative(layer.S, 1.0) == pytest.approx(relative(dense.weight, 1.0), rel=0.02)


def test_mup_scales_are_the_dense_fan_in_over_each_factors():
    assert factor_scales(PHMLinear(128, 512, n=4), "mup") == {"A": 32.0, "S": 4.0}
    low_rank = factor_scales(PHMLinear(128, 512, n=4, rank=8), "mup")
    assert low_rank["S_left"] == 16.0 and low_rank["S_right"] == 4.0
    spec = LinearSpec("phm", n=4, rule_lr_scale="mup", factor_lr_scale="balanced")
    layer = spec.build(128, 512)
    assert scales_of(layer, "A") == (32.0, 1.0) and scales_of(layer, "S") == (1.0, 1.0)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(kind="dense", factor_lr_scale=2.0), "a dense layer has none"),
        (dict(kind="quaternion", rule_lr_scale=2.0), "the rule A of quaternion layers is a constant"),
        (dict(kind="phm", n=4, rule="algebra-frozen", rule_decay=False), "the rule A of a frozen rule"),
        (dict(kind="phm", n=4, rule_lr_scale=0), "expected a number > 0 or one of balanced, mup"),
        (dict(kind="phm", n=4, factor_lr_scale="fast"), "factor_lr_scale='fast'"),
        (dict(kind="phm", n=4, factor_lr_scale=float("inf")), "expected a number > 0"),
    ],
)
def test_training_options_that_no_layer_can_honour_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        LinearSpec(**options)


def test_a_kind_that_starts_at_zero_logs_a_bounded_relative_update():
    """PHYDI's gates start at 0: their first step is a whole new value (1), not a quotient by zero that would
    swamp the epoch's mean; later steps are relative to the norm they then have."""
    gate = nn.Parameter(torch.zeros(3))
    model = nn.Module()
    model.residual_gate = gate
    logged = []
    optimizer = torch.optim.SGD([gate], lr=0.1)
    statistics = ParameterStatistics(model, logged.append, optimizer)
    for _ in range(2):
        gate.grad = -torch.ones(3)
        optimizer.step()
    first, second = (stats["update_gate"] for stats in logged)
    assert first.item() == 1.0 and logged[0]["pnorm_gate"].item() == 0.0
    torch.testing.assert_close(second, torch.tensor(0.5))  # 0.1 -> 0.2 on each entry: a step of half the norm after
    assert all(0 <= stats["update_gate"] <= 2 for stats in logged)
    statistics.close()


def test_quaternion_factors_take_a_scale():
    layer = LinearSpec("quaternion", factor_lr_scale="mup", factor_decay=False).build(8, 8)
    assert scales_of(layer, "S") == (4.0, 0.0) and not isinstance(layer.A, nn.Parameter)


def test_statistics_by_kind_are_the_norms_of_what_the_optimizer_stepped():
    torch.manual_seed(0)
    model = nn.Sequential(PHMLinear(8, 8, n=2), nn.LayerNorm(8), nn.Linear(8, 4), nn.Embedding(5, 3))
    logged = []
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    statistics = ParameterStatistics(model, logged.append).attach(optimizer)
    assert list(statistics.kinds) == ["rule", "factor", "dense", "bias", "norm"] + ["embedding"]
    model[:3](torch.randn(4, 8)).sum().backward()  # the embedding gets no gradient: not stepped, not counted
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer.step()
    after = {name: p.detach().clone() for name, p in model.named_parameters()}
    (stats,) = logged
    assert "gnorm_embedding" not in stats
    for kind, named in parameters_by_kind(model).items():
        if kind == "embedding":
            continue
        names = [name for name, _ in named]
        norm = lambda tensors: torch.cat([t.flatten() for t in tensors]).norm()  # noqa: E731
        torch.testing.assert_close(stats[f"gnorm_{kind}"], norm([grads[n] for n in names]))
        torch.testing.assert_close(stats[f"pnorm_{kind}"], norm([before[n] for n in names]))
        # SGD moves by lr x gradient; relative to the larger of the norms before and after the step
        larger = torch.maximum(stats[f"pnorm_{kind}"], norm([after[n] for n in names]))
        torch.testing.assert_close(stats[f"update_{kind}"], 0.1 * stats[f"gnorm_{kind}"] / larger)
    other = torch.optim.SGD([nn.Parameter(torch.ones(2))], lr=0.1)  # an optimizer it is not attached to
    other.param_groups[0]["params"][0].grad = torch.ones(2)
    other.step()
    assert len(logged) == 1
    statistics.close()
    model[:3](torch.randn(4, 8)).sum().backward()
    optimizer.step()
    assert len(logged) == 1


# --- through fairseq: the model flags, fairseq's trainer and its metrics ------------------------------

DICTIONARIES = str(Path(__file__).parent / "fixtures/checkpoints/data/translation")  # dict.src.txt, dict.tgt.txt
TINY_DEMO = ["--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "32", "--decoder-embed-dim", "32"]
TINY_DEMO += ["--encoder-ffn-embed-dim", "64", "--decoder-ffn-embed-dim", "64"]


def fairseq_args(*flags):
    from fairseq import options

    argv = [DICTIONARIES, "--task", "translation", "--source-lang", "src", "--target-lang", "tgt", *TINY_DEMO]
    argv += ["--optimizer", "adam", "--lr", "0.01", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4"]
    argv += ["--warmup-init-lr", "0.001"]
    argv += ["--weight-decay", "0.1", "--criterion", "label_smoothed_cross_entropy", "--cpu", *flags]
    return options.parse_args_and_arch(options.get_training_parser(), input_args=argv)


def fairseq_model(*flags):
    from fairseq import tasks

    args = fairseq_args(*flags)
    task = tasks.setup_task(args)
    return args, task, task.build_model(args)


def test_the_model_flags_mark_every_rule_and_factor_of_a_phm_transformer():
    _, _, model = fairseq_model("--arch", "phm_transformer_demo", "--phm-n", "4", "--rule-lr-scale", "balanced")
    layers = [m for m in model.modules() if isinstance(m, PHMLinear)]
    assert (
        len(layers) == 12
    )  # per layer: fused Q/K/V, out, fc1, fc2; in the decoder also Q, K, V, out of its encoder attention
    for layer in layers:
        assert scales_of(layer, "A") == (factor_scales(layer, "balanced")["A"], 1.0) > (1.0, 1.0)
        assert scales_of(layer, "S") == (1.0, 1.0)


@pytest.mark.parametrize("init, fused", [("one-map", 11.31), ("per-projection", 8.0)])
def test_the_balanced_scales_of_the_demo_layers_are_the_ones_docs_training_md_gives(init, fused):
    """docs/training.md quotes these (n = 4, demo sizes 128 and 512): the fused Q/K/V map's gain is 1/sqrt 2
    (one-map), or 1 (per-projection)."""
    sizes = ["--encoder-embed-dim", "128", "--decoder-embed-dim", "128"]
    sizes += ["--encoder-ffn-embed-dim", "512", "--decoder-ffn-embed-dim", "512"]
    _, _, model = fairseq_model("--arch", "phm_transformer_demo", "--phm-n", "4", *sizes, "--fused-qkv-init", init)
    scales = {
        name.split(".", 3)[-1]: round(factor_scales(layer, "balanced")["A"], 2)
        for name, layer in model.named_modules()
        if isinstance(layer, PHMLinear) and ".layers.0." in name and name.startswith("decoder")
    }
    assert scales == {
        "self_attn.qkv_proj": fused,
        "self_attn.out_proj": 5.66,
        "encoder_attn.q_proj": 8.0,
        "encoder_attn.k_proj": 8.0,
        "encoder_attn.v_proj": 8.0,
        "encoder_attn.out_proj": 5.66,
        "fc1": 8.94,
        "fc2": 8.94,
    }


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--arch", "transformer_twin_demo", "--factor-lr-scale", "2"], "--factor-lr-scale 2.0: .*a dense layer"),
        (["--arch", "quaternion_transformer_demo", "--no-rule-decay"], "--no-rule-decay: .*the rule A of quaternion"),
        (
            ["--arch", "phm_transformer_demo", "--phm-n", "4", "--phm-rule", "algebra-frozen", "--rule-lr-scale", "2"],
            "--phm-n 4 --phm-rule algebra-frozen --rule-lr-scale 2.0: .*frozen rule",
        ),
        (["--arch", "phm_transformer_demo", "--no-factor-decay", "--fp16"], "--no-factor-decay with --fp16: .*flat"),
        (["--arch", "phm_transformer_demo", "--log-parameter-stats", "--fp16"], "--log-parameter-stats with --fp16"),
    ],
)
def test_flags_that_the_model_or_the_optimizer_cannot_honour_are_refused(flags, message):
    from fairseq import tasks

    args = fairseq_args(*flags)
    with pytest.raises(ValueError, match=message):
        tasks.setup_task(args).build_model(args)


def test_fairseq_trainer_steps_with_the_scales_and_logs_the_statistics_in_its_metrics():
    """fairseq's own Trainer (what fairseq-train runs): its optimizer, lr scheduler and metrics."""
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer

    torch.manual_seed(1)
    flags = ["--arch", "phm_transformer_demo", "--phm-n", "4", "--rule-lr-scale", "10", "--log-parameter-stats"]
    args, task, model = fairseq_model(*flags)
    trainer = Trainer(convert_namespace_to_omegaconf(args), task, model, task.build_criterion(args))
    words = len(task.target_dictionary)
    tokens = torch.randint(4, words, (8, 6))
    sample = {
        "id": torch.arange(8),
        "nsentences": 8,
        "ntokens": tokens.numel(),
        "net_input": {"src_tokens": tokens, "src_lengths": torch.full((8,), 6), "prev_output_tokens": tokens},
        "target": tokens,
    }
    rule = next(m for m in model.modules() if isinstance(m, PHMLinear)).A
    for _ in range(3):
        before, lr = rule.detach().clone(), trainer.get_lr()
        with metrics.aggregate(new_root=True) as aggregated:
            trainer.train_step([sample])
        # fairseq's Adam: at most about lr x 10 per entry (bias correction: 1.05 x), and more than lr
        assert 1.2 * 10 * lr >= (rule.detach() - before).abs().max() > 2 * lr
    logged = aggregated.get_smoothed_values()
    for kind in ("rule", "factor", "bias", "norm", "embedding"):
        assert logged[f"update_{kind}"] > 0 and logged[f"gnorm_{kind}"] > 0 and logged[f"pnorm_{kind}"] > 0
    # the rule at 10 x the lr moves, relative to its size, about as fast as the factors (the 'balanced' rule
    # asks 1 / (sqrt(n) rms(W)), 5.7 at 32 -> 32 and 7.9 at 32 -> 96, n = 4), and far faster than at 1 x
    assert 0.3 < logged["update_rule"] / logged["update_factor"] < 3
    assert [g["lr_scale"] for g in trainer.optimizer.param_groups] == [1.0, 10.0]


def test_an_lr_scale_is_parsed_and_checked_where_the_flag_is_read():
    with pytest.raises(SystemExit):  # argparse: "invalid lr_scale value: '0'"
        fairseq_args("--arch", "phm_transformer_demo", "--phm-n", "4", "--rule-lr-scale", "0")
    assert fairseq_args("--arch", "phm_transformer_demo", "--rule-lr-scale", "mup").rule_lr_scale == "mup"


def test_the_linear_maps_are_decided_once_per_model(monkeypatch):
    """build_model decides the maps and hands them to the encoder and the decoder (not 3 specs a model)."""
    from phm_fairseq.models import transformer

    made = []
    decide = transformer.linear_spec_from_args
    monkeypatch.setattr(transformer, "linear_spec_from_args", lambda *a, **k: made.append(1) or decide(*a, **k))
    _, _, model = fairseq_model("--arch", "phm_transformer_demo", "--phm-n", "4")
    assert len(made) == 1
    assert model.encoder.maps is model.decoder.maps


def _sample(task):
    tokens = torch.randint(4, len(task.target_dictionary), (8, 6))
    return {
        "id": torch.arange(8),
        "nsentences": 8,
        "ntokens": tokens.numel(),
        "net_input": {"src_tokens": tokens, "src_lengths": torch.full((8,), 6), "prev_output_tokens": tokens},
        "target": tokens,
    }


def test_a_trained_model_loads_for_inference_without_training_machinery_and_resumes_bit_for_bit(tmp_path):
    """issue 58, item 5: a model trained with --log-parameter-stats and scales, loaded with checkpoint_utils,
    pickles and torch.saves, and no optimizer hook is installed; --restore-file goes on as the uninterrupted run."""
    import io

    from fairseq import checkpoint_utils
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.logging import metrics
    from fairseq.trainer import Trainer
    from torch.optim.optimizer import _global_optimizer_post_hooks, _global_optimizer_pre_hooks

    flags = ["--arch", "phm_transformer_demo", "--phm-n", "4", "--rule-lr-scale", "balanced", "--no-factor-decay"]
    flags += ["--log-parameter-stats", "--save-dir", str(tmp_path)]

    def trainer_of():
        torch.manual_seed(1)
        args, task, model = fairseq_model(*flags)
        return Trainer(convert_namespace_to_omegaconf(args), task, model, task.build_criterion(args)), task

    trainer, task = trainer_of()
    torch.manual_seed(2)
    samples = [_sample(task) for _ in range(4)]
    for sample in samples[:2]:
        with metrics.aggregate(new_root=True):
            trainer.train_step([sample])
    trainer.consolidate_optimizer()  # as fairseq's checkpoint_utils.save_checkpoint does
    trainer.save_checkpoint(str(tmp_path / "checkpoint.pt"), {})
    for sample in samples[2:]:
        with metrics.aggregate(new_root=True):
            trainer.train_step([sample])

    resumed, _ = trainer_of()
    resumed.load_checkpoint(str(tmp_path / "checkpoint.pt"))
    assert resumed.get_num_updates() == 2 and len(resumed.optimizer.param_groups) > 2  # split by scale
    for sample in samples[2:]:
        with metrics.aggregate(new_root=True):
            resumed.train_step([sample])
    for (name, p), q in zip(trainer.model.named_parameters(), resumed.model.parameters()):
        assert torch.equal(p, q), name

    (model,), _ = checkpoint_utils.load_model_ensemble(
        [str(tmp_path / "checkpoint.pt")], arg_overrides={"data": DICTIONARIES}
    )
    pickle.loads(pickle.dumps(model))
    torch.save(model, io.BytesIO())
    assert not _global_optimizer_pre_hooks and not _global_optimizer_post_hooks
    assert not any(hasattr(m, "parameter_statistics") for m in model.modules())
