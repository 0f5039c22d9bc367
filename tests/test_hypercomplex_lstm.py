"""HypercomplexLSTM against nn.LSTM, a literal quaternion LSTM and a per-step LSTM of its own layers."""

import pytest
import torch
from conftest import hamilton_product_eq_2_2
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from phm_fairseq.modules import HypercomplexLSTM, LinearSpec, PHMLinear, max_mean_pool

H = 8  # hidden size: small so that the float64 comparisons are quick


def copy_from_nn_lstm(ours: HypercomplexLSTM, ref: nn.LSTM) -> None:
    """Give an n = 1 PHM-LSTM the weights of nn.LSTM (H = A_1 S_1 with A_1 = 1; one bias)."""
    directions = 2 if ref.bidirectional else 1
    with torch.no_grad():
        for index, cell in enumerate(ours.cells):
            suffix = f"_l{index // directions}" + ("_reverse" if index % directions else "")
            w_ih, w_hh = getattr(ref, "weight_ih" + suffix), getattr(ref, "weight_hh" + suffix)
            if cell.gate_layout == "fused":
                pairs = [(cell.input_map, w_ih), (cell.hidden_map, w_hh)]
            else:
                pairs = [
                    (m, w.chunk(4)[g])
                    for maps, w in ((cell.input_maps, w_ih), (cell.hidden_maps, w_hh))
                    for g, m in enumerate(maps)
                ]
            for layer, weight in pairs:
                layer.A.fill_(1.0)
                layer.S.copy_(weight.unsqueeze(0))
            cell.bias.copy_(getattr(ref, "bias_ih" + suffix) + getattr(ref, "bias_hh" + suffix))


def padded_batch(lengths, features, batch_first=False, dtype=torch.float64):
    x = torch.randn(len(lengths), max(lengths), features, dtype=dtype)
    for b, length in enumerate(lengths):
        x[b, length:] = 0.0
    return x if batch_first else x.transpose(0, 1)


@pytest.mark.parametrize("gate_layout", ["per-gate", "fused"])
@pytest.mark.parametrize("num_layers,bidirectional", [(1, False), (2, True)])
def test_n1_equals_nn_lstm_with_the_same_weights(gate_layout, num_layers, bidirectional):
    torch.manual_seed(0)
    ref = nn.LSTM(12, H, num_layers=num_layers, bidirectional=bidirectional).double()
    ours = HypercomplexLSTM(12, H, LinearSpec("phm", n=1), num_layers, bidirectional, gate_layout).double()
    copy_from_nn_lstm(ours, ref)
    x = padded_batch([5, 5, 5], 12)
    states = num_layers * (2 if bidirectional else 1)
    hx = (torch.randn(states, 3, H, dtype=torch.float64), torch.randn(states, 3, H, dtype=torch.float64))
    for args in ((x,), (x, hx)):
        (out, (h, c)), (ref_out, (ref_h, ref_c)) = ours(*args), ref(*args)
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(h, ref_h)
        torch.testing.assert_close(c, ref_c)


@pytest.mark.parametrize("batch_first", [False, True])
def test_n1_equals_nn_lstm_on_packed_unsorted_sequences_bidirectional(batch_first):
    torch.manual_seed(1)
    ref = nn.LSTM(12, H, num_layers=2, bidirectional=True, batch_first=batch_first).double()
    ours = HypercomplexLSTM(12, H, LinearSpec("phm", n=1), 2, True, batch_first=batch_first).double()
    copy_from_nn_lstm(ours, ref)
    lengths = torch.tensor([3, 7, 1, 5])  # not sorted: exercises sorted/unsorted indices
    x = padded_batch(lengths.tolist(), 12, batch_first)
    hx = (torch.randn(4, 4, H, dtype=torch.float64), torch.randn(4, 4, H, dtype=torch.float64))
    packed = pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=False)
    (out, (h, c)), (ref_out, (ref_h, ref_c)) = ours(packed, hx), ref(packed, hx)
    torch.testing.assert_close(out.data, ref_out.data)
    torch.testing.assert_close(h, ref_h)
    torch.testing.assert_close(c, ref_c)
    # and each sequence is what it would be alone, without padding (the reverse direction
    # starts at the sequence's own last token)
    padded, _ = pad_packed_sequence(out, batch_first=batch_first)
    padded = padded if batch_first else padded.transpose(0, 1)
    xb = x if batch_first else x.transpose(0, 1)
    for b, length in enumerate(lengths.tolist()):
        one = xb[b : b + 1, :length] if batch_first else xb[b : b + 1, :length].transpose(0, 1)
        alone, _ = ours(one, (hx[0][:, b : b + 1], hx[1][:, b : b + 1]))
        alone = alone[0] if batch_first else alone[:, 0]
        torch.testing.assert_close(padded[b, :length], alone)


def quaternion_lstm_per_step(lstm: HypercomplexLSTM, x):
    """Parcollet et al.'s quaternion LSTM written out per time step: every gate is
    W_g (x) x_t + R_g (x) h_{t-1} + b_g with Hamilton products of the gate's component weights."""
    cell = lstm.cells[0]
    h = x.new_zeros(x.size(1), lstm.hidden_size)
    c = torch.zeros_like(h)
    bias = cell.bias.chunk(4)
    outputs = []
    for x_t in x:
        i, f, g, o = (
            hamilton_product_eq_2_2(cell.input_maps[k].S, x_t)
            + hamilton_product_eq_2_2(cell.hidden_maps[k].S, h)
            + bias[k]
            for k in range(4)
        )
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs), h, c


@pytest.mark.parametrize("spec", [LinearSpec("quaternion"), LinearSpec("phm", n=4, rule="algebra-frozen")], ids=str)
def test_frozen_hamilton_phm_lstm_equals_literal_quaternion_lstm(spec):
    torch.manual_seed(2)
    lstm = HypercomplexLSTM(16, H, spec).double()
    x = padded_batch([6, 6], 16)
    out, (h, c) = lstm(x)
    ref_out, ref_h, ref_c = quaternion_lstm_per_step(lstm, x)
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(h[0], ref_h)
    torch.testing.assert_close(c[0], ref_c)


def lstm_per_step_of_its_layers(lstm: HypercomplexLSTM, x):
    """The recurrence as a Python loop that calls the PHM layers themselves at every step."""
    cell = lstm.cells[0]
    h = x.new_zeros(x.size(1), lstm.hidden_size)
    c = torch.zeros_like(h)
    outputs = []
    for x_t in x:
        if cell.gate_layout == "fused":
            y = cell.input_map(x_t) + cell.hidden_map(h) + cell.bias
        else:
            y = torch.cat([cell.input_maps[k](x_t) + cell.hidden_maps[k](h) for k in range(4)], -1) + cell.bias
        i, f, g, o = y.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        outputs.append(h)
    return torch.stack(outputs)


@pytest.mark.parametrize("gate_layout", ["per-gate", "fused"])
def test_gradients_reach_A_and_S_through_the_fused_op(gate_layout):
    torch.manual_seed(3)
    lstm = HypercomplexLSTM(10, 10, LinearSpec("phm", n=5), gate_layout=gate_layout).double()
    x = padded_batch([4, 4, 4], 10)
    target = torch.randn(4, 3, 10, dtype=torch.float64)
    grads = []
    for run in (lambda: lstm(x)[0], lambda: lstm_per_step_of_its_layers(lstm, x)):
        lstm.zero_grad()
        (run() * target).sum().backward()
        grads.append({name: p.grad.clone() for name, p in lstm.named_parameters()})
    fused, per_step = grads
    phm_names = [name for name in fused if name.endswith((".A", ".S"))]
    assert len(phm_names) == (16 if gate_layout == "per-gate" else 4)
    for name in fused:
        assert fused[name].abs().sum() > 0, name
        torch.testing.assert_close(fused[name], per_step[name], msg=name)


def test_table1_parameter_counts_of_the_layouts():
    counts = {}
    for layout in ("per-gate", "fused"):
        for spec in (LinearSpec(), LinearSpec("quaternion"), *(LinearSpec("phm", n=n) for n in (2, 5, 10))):
            counts[layout, str(spec)] = sum(
                p.numel() for p in HypercomplexLSTM(300, 300, spec, gate_layout=layout).parameters()
            )
    assert [
        counts["per-gate", k]
        for k in ("dense", "quaternion (Hamilton)", "PHM n=2 (learned)", "PHM n=5 (learned)", "PHM n=10 (learned)")
    ] == [721_200, 181_200, 361_264, 146_200, 81_200]
    assert counts["fused", "PHM n=10 (learned)"] == 2 * (300 * 1200 // 10 + 1000) + 1200 == 75_200


def test_initialisation_matches_nn_lstm_variance_for_every_kind():
    target = 1.0 / (3 * 300)  # U(-1/sqrt(h), 1/sqrt(h))
    for layout in ("per-gate", "fused"):
        for spec in (LinearSpec(), LinearSpec("quaternion"), LinearSpec("phm", n=5)):
            w_ih, w_hh = HypercomplexLSTM(300, 300, spec, gate_layout=layout).cells[0].weights()
            for w in (w_ih, w_hh):
                assert 0.85 < w.var().item() / target < 1.15, (layout, str(spec))


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="unknown gate layout 'diagonal'"):
        HypercomplexLSTM(8, 8, gate_layout="diagonal")
    with pytest.raises(ValueError, match="n=3 must divide both in_features=8"):
        HypercomplexLSTM(8, 8, LinearSpec("phm", n=3))
    with pytest.raises(ValueError, match="3-D input or a PackedSequence"):
        HypercomplexLSTM(8, 8)(torch.randn(5, 8))


def test_max_mean_pool_ignores_padding():
    torch.manual_seed(4)
    states = torch.randn(3, 6, 5)
    lengths = [6, 2, 4]
    mask = torch.arange(6)[None, :] >= torch.tensor(lengths)[:, None]
    pooled = max_mean_pool(states, mask)
    expected = torch.stack([torch.cat([states[b, :n].amax(0), states[b, :n].mean(0)]) for b, n in enumerate(lengths)])
    torch.testing.assert_close(pooled, expected)
    # whatever the padded positions hold (fairseq pads LSTM outputs with the pad index, 1.0)
    torch.testing.assert_close(max_mean_pool(states.masked_fill(mask[..., None], 1e4), mask), expected)
    with pytest.raises(ValueError, match="no tokens"):
        max_mean_pool(states, torch.ones(3, 6, dtype=torch.bool))


def test_phm_layers_in_the_lstm_are_phm_linear():
    lstm = HypercomplexLSTM(10, 10, LinearSpec("phm", n=5))
    assert sum(isinstance(m, PHMLinear) for m in lstm.modules()) == 8


@pytest.mark.parametrize("gate_layout", ["per-gate", "fused"])
def test_functional_call_in_eval_mode_uses_the_tensors_it_is_given(gate_layout):
    lstm = HypercomplexLSTM(8, H, LinearSpec("phm", n=4), gate_layout=gate_layout).eval()
    x = torch.randn(6, 3, 8)
    zeros = {name: torch.zeros_like(t) for name, t in lstm.named_parameters()}
    with torch.no_grad():
        own, _ = lstm(x)  # the layer's own tensors first
        out, (h, c) = torch.func.functional_call(lstm, zeros, (x,))
        # no weights, no bias: every gate is sigmoid(0) = 1/2 and the candidate tanh(0) = 0
        assert torch.equal(out, torch.zeros_like(out)) and torch.equal(c, torch.zeros_like(c))
        torch.testing.assert_close(lstm(x)[0], own)
    torch.testing.assert_close(own, lstm(x)[0].detach())  # eval mode with gradients: no cache
