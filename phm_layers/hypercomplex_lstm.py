"""PHM-LSTM (Zhang et al., ICLR 2021, sec. 4.1): an LSTM whose gate maps come from a LinearSpec.

    y_t = PHM(x_t) + PHM(h_{t-1}) + b,     i, f, g, o = four-way split of y_t
    c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g),     h_t = sigmoid(o) * tanh(c_t)

(PyTorch's gate order and cell; the paper's h_t = o_t * c_t is read as the usual LSTM output.)
Once H is built, both PHMs are plain weight matrices: every forward builds them once and
hands them to PyTorch's fused LSTM op (``torch._VF.lstm``, what ``nn.LSTM`` calls), so the
recurrence runs at ``nn.LSTM`` speed and gradients flow back into A and S through it.
"""

import math
from typing import Optional, Tuple

import torch
from torch import _VF, Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from .derived_weight import DerivedWeight
from .linear_spec import LinearSpec

GATE_LAYOUTS = ("per-gate", "fused")
"""per-gate: each gate has its own map per input (8 layers in -> hidden per LSTM layer and
direction: the layout whose parameter counts are those of Table 1); fused: one map per input,
in -> 4 x hidden, split four ways as the paper's equation writes it."""


class GateMaps(nn.Module):
    """The two gate maps and the bias of one LSTM layer in one direction."""

    def __init__(
        self, input_size: int, hidden_size: int, linear: LinearSpec, gate_layout: str, device=None, dtype=None
    ):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        # nn.LSTM draws every weight from U(-1/sqrt(hidden), 1/sqrt(hidden)), variance 1/(3 hidden);
        # the spec's xavier target 2 gain^2 / (in + out) is set to that, whatever the kind.
        gain = lambda fan_in, fan_out: math.sqrt((fan_in + fan_out) / (6.0 * hidden_size))  # noqa: E731
        if gate_layout == "per-gate":
            self.input_maps = nn.ModuleList(
                linear.build(input_size, hidden_size, bias=False, gain=gain(input_size, hidden_size), **factory)
                for _ in range(4)
            )
            self.hidden_maps = nn.ModuleList(
                linear.build(hidden_size, hidden_size, bias=False, gain=gain(hidden_size, hidden_size), **factory)
                for _ in range(4)
            )
        elif gate_layout == "fused":
            self.input_map = linear.build(
                input_size, 4 * hidden_size, bias=False, gain=gain(input_size, 4 * hidden_size), **factory
            )
            self.hidden_map = linear.build(
                hidden_size, 4 * hidden_size, bias=False, gain=gain(hidden_size, 4 * hidden_size), **factory
            )
        else:
            raise ValueError(f"unknown gate layout {gate_layout!r}: choose one of {', '.join(GATE_LAYOUTS)}")
        self.gate_layout = gate_layout
        # One bias b, as in y_t = PHM(x_t) + PHM(h_{t-1}) + b (nn.LSTM has two).
        self.bias = nn.Parameter(torch.empty(4 * hidden_size, **factory))
        self.bound = 1.0 / math.sqrt(hidden_size)  # nn.LSTM's
        nn.init.uniform_(self.bias, -self.bound, self.bound)

    def maps(self) -> list:
        """The gate maps, those of the input first."""
        if self.gate_layout == "fused":
            return [self.input_map, self.hidden_map]
        return [*self.input_maps, *self.hidden_maps]

    def reset_parameters(self) -> None:
        """The maps and the bias drawn again, as at construction."""
        for layer in self.maps():
            if isinstance(layer, nn.Linear):  # xavier at the gain above is U(-bound, bound)
                nn.init.uniform_(layer.weight, -self.bound, self.bound)
            else:
                layer.reset_parameters()
        nn.init.uniform_(self.bias, -self.bound, self.bound)

    def weights(self) -> Tuple[Tensor, Tensor]:
        """W_ih (4 hidden, input) and W_hh (4 hidden, hidden), gates in PyTorch's i, f, g, o order: each
        map's weight as its own forward computes with it (a merged map's H itself)."""
        if self.gate_layout == "fused":
            return _weight_of(self.input_map), _weight_of(self.hidden_map)
        return (
            torch.cat([_weight_of(m) for m in self.input_maps]),
            torch.cat([_weight_of(m) for m in self.hidden_maps]),
        )


def _weight_of(layer: nn.Module) -> Tensor:
    return layer.current_weight() if isinstance(layer, DerivedWeight) else layer.weight


def _fused_lstm(*args):
    if torch.compiler.is_compiling():  # run eagerly between the graphs, as TorchDynamo runs nn.LSTM
        return torch.compiler.disable(_VF.lstm)(*args)
    return _VF.lstm(*args)


class HypercomplexLSTM(nn.Module):
    """A drop-in ``nn.LSTM`` (same inputs, outputs, PackedSequence support) with gate maps from ``linear``.

    Args:
        input_size, hidden_size, num_layers, batch_first, dropout, bidirectional: as ``nn.LSTM``.
        linear: how each gate map is built (``LinearSpec("dense")`` is an ordinary LSTM with one bias).
        gate_layout: "per-gate" (default) or "fused", see ``GATE_LAYOUTS``.
        device, dtype: where and in which type the parameters are made, as for ``nn.LSTM``.

    Under ``torch.compile`` the gate maps are compiled and the fused LSTM op runs eagerly between
    the graphs, as TorchDynamo runs ``nn.LSTM`` itself.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        linear: LinearSpec = LinearSpec(),
        num_layers: int = 1,
        bidirectional: bool = False,
        gate_layout: str = "per-gate",
        batch_first: bool = False,
        dropout: float = 0.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be at least 1, got {num_layers}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bidirectional, self.batch_first, self.dropout = bidirectional, batch_first, float(dropout)
        self.gate_layout, self.linear = gate_layout, linear
        directions = 2 if bidirectional else 1
        self.cells = nn.ModuleList(
            GateMaps(
                input_size if layer == 0 else hidden_size * directions,
                hidden_size,
                linear,
                gate_layout,
                device=device,
                dtype=dtype,
            )
            for layer in range(num_layers)
            for _ in range(directions)
        )

    def reset_parameters(self) -> None:
        """Every gate map and bias drawn again, as at construction (e.g. after ``to_empty()``)."""
        for cell in self.cells:
            cell.reset_parameters()

    def flat_weights(self) -> list:
        """w_ih, w_hh, b_ih, b_hh per layer and direction, the list ``nn.LSTM`` hands the fused op."""
        params = []
        for cell in self.cells:
            w_ih, w_hh = cell.weights()
            params += [w_ih, w_hh, cell.bias, torch.zeros_like(cell.bias)]
        return params

    def forward(self, input, hx: Optional[Tuple[Tensor, Tensor]] = None):
        directions = 2 if self.bidirectional else 1
        packed = isinstance(input, PackedSequence)
        if packed:
            data, batch_sizes, sorted_indices, unsorted_indices = input
        else:
            if input.dim() != 3:
                raise ValueError(f"HypercomplexLSTM expects 3-D input or a PackedSequence, got {input.dim()}-D")
            data, batch_sizes, sorted_indices, unsorted_indices = input, None, None, None
        if hx is None:
            batch = int(batch_sizes[0]) if packed else input.size(0 if self.batch_first else 1)
            zeros = data.new_zeros(self.num_layers * directions, batch, self.hidden_size)
            hx = (zeros, zeros)
        elif sorted_indices is not None:
            hx = tuple(h.index_select(1, sorted_indices) for h in hx)
        params = self.flat_weights()
        if packed:
            output, h, c = _fused_lstm(
                data, batch_sizes, hx, params, True, self.num_layers, self.dropout, self.training, self.bidirectional
            )
            output = PackedSequence(output, batch_sizes, sorted_indices, unsorted_indices)
        else:
            output, h, c = _fused_lstm(
                data,
                hx,
                params,
                True,
                self.num_layers,
                self.dropout,
                self.training,
                self.bidirectional,
                self.batch_first,
            )
        if unsorted_indices is not None:
            h, c = h.index_select(1, unsorted_indices), c.index_select(1, unsorted_indices)
        return output, (h, c)

    def extra_repr(self) -> str:
        return (
            f"{self.input_size}, {self.hidden_size}, linear={self.linear}, gate_layout={self.gate_layout}, "
            f"num_layers={self.num_layers}, bidirectional={self.bidirectional}, dropout={self.dropout}"
        )
