"""Recurrent layers and cells: LSTM, GRU and Elman RNN (tanh or ReLU), forward and backward,
on every backend.

**Forward**, per time step and batch row (a *row*: the input's elements divided by its last
dimension, so ``[T, B, I]``, ``[B, T, I]`` and a packed ``[sum(batch_sizes), I]`` all work), for
one layer and direction with input size ``I``, hidden size ``H`` and ``G`` gates (LSTM 4, GRU 3,
RNN 1):

- the gate matrix products ``x W_ih^T`` and ``h W_hh^T``: ``G H (I + H)`` MACs, ``2 G H (I + H)``
  FLOPs (LSTM ``8 H (I + H)``, GRU ``6 H (I + H)``, RNN ``2 H (I + H)``); an LSTM with a
  projection (``proj_size`` ``P``) multiplies ``h`` (size ``P``) by ``W_hh`` and ``c`` by
  ``W_hr``: ``G H (I + P) + P H`` MACs. Biases are not counted (as for ``addmm``);
- the gate math at 1 FLOP per element per elementwise op, the rates of the pointwise and
  activation families, so that a fused kernel counts what the same cell run as separate ops
  (``aten::lstm_cell`` on CPU) counts: LSTM ``13 H`` (the sum of the two gate products 4H, three
  sigmoids and a tanh 4H, ``c' = f c + i g`` 3H, ``h' = o tanh(c')`` 2H), GRU ``10 H``, RNN
  ``2 H`` (sum, tanh or ReLU).

Layers above the first take ``D * H`` inputs (``D * P`` with a projection; ``D`` = 2 when
bidirectional); each direction of each layer costs the above.

**Backward** costs twice the forward, as ``convolution_backward`` and the normalizations count
it: the data gradients (through ``W_ih``, ``W_hh``, ``W_hr``) and the weight gradients are each
as many MACs as the forward products, and the gate math counts twice. Where an ``output_mask``
says a gradient is not computed (cuDNN, MIOpen), its products are left out: the weight
gradients, and the first layer's input gradient (the recurrent data gradients always run).

Backends and how the shapes are read:

- CPU (oneDNN): ``aten::mkldnn_rnn_layer`` per layer and direction (LSTM only), from the weight
  shapes; ``aten::mkldnn_rnn_layer_backward``;
- cuDNN ``aten::_cudnn_rnn`` / ``_cudnn_rnn_backward`` and MIOpen ``aten::miopen_rnn`` /
  ``miopen_rnn_backward``: the whole stack in one op, from the input's size and the scalar
  arguments (``mode``, ``hidden_size``, ``proj_size``, ``num_layers``, ``bidirectional``), so
  that traces without the shapes of tensor lists are understood too; schemas without
  ``proj_size`` (PyTorch < 1.8) are recognised by their number of arguments;
- MPS ``aten::_lstm_mps`` / ``lstm_mps_backward``: from the parameter list;
- CUDA cells: ``aten::lstm_cell`` runs two matrix products (counted as such) and
  ``aten::_thnn_fused_lstm_cell``, which is the gate math only (``13 H`` per row; backward
  ``26 H``); likewise ``aten::_thnn_fused_gru_cell`` (``10 H``; backward ``20 H``);
- composite ops, counted only when nothing inside them is counted (``composite=True``): the
  layers ``aten::lstm``, ``aten::gru``, ``aten::rnn_tanh``, ``aten::rnn_relu`` (from their
  parameter list; both the padded ``input`` and the packed ``data`` overloads) and the cells
  ``aten::lstm_cell``, ``aten::gru_cell``, ``aten::rnn_tanh_cell``, ``aten::rnn_relu_cell``.
  On CPU, GRU and RNN layers, cells and LSTMs that oneDNN does not take (packed sequences,
  projections, fp64) run as ``aten::linear``, ``aten::sigmoid_``, ``aten::add_``... inside
  them, which are counted instead; an LSTM layer runs ``aten::mkldnn_rnn_layer``; on GPUs the
  layers run ``aten::_cudnn_rnn`` / ``aten::miopen_rnn``.

Bytes: the input, the weights (once), the initial states read; the output and final states
written (backward: the gradients of all of them). The workspace kept for the backward is left
out, like the saved statistics of normalizations.
"""

from __future__ import annotations

from math import prod

import msgspec

from traceprof.flops.registry import Family, Registry
from traceprof.flops.shapes import LIST_DTYPE, ArgumentError, OpArgs, OpCost, Shape, nbytes

#: this module's formulas: one of the tables traceprof.flops.REGISTRY is made of
FORMULAS = Registry()
_R = FORMULAS

#: gates per cell kind
LSTM, GRU, RNN = 4, 3, 1
#: FLOPs of a cell's elementwise gate math per hidden unit, per time step and batch row
GATE_MATH = {LSTM: 13, GRU: 10, RNN: 2}
#: cuDNN's and MIOpen's ``mode`` argument: RNN_RELU, RNN_TANH, LSTM, GRU
MODE_GATES = {0: RNN, 1: RNN, 2: LSTM, 3: GRU}
#: the gates of the composite layer ops, by name
_GATES_OF = {"lstm": LSTM, "gru": GRU, "rnn_tanh": RNN, "rnn_relu": RNN, "_lstm_mps": LSTM}


class Layer(msgspec.Struct, frozen=True):
    """One direction of one layer."""

    input_size: int
    hidden: int
    gates: int
    proj: int = 0  # LSTM projection size (0: none)

    @property
    def state(self) -> int:
        """The size of the hidden state h (the projection's, when there is one)."""
        return self.proj or self.hidden

    @property
    def input_macs(self) -> int:
        return self.gates * self.hidden * self.input_size

    @property
    def recurrent_macs(self) -> int:
        return self.gates * self.hidden * self.state + self.proj * self.hidden

    @property
    def macs(self) -> int:
        return self.input_macs + self.recurrent_macs

    @property
    def gate_math(self) -> int:
        return GATE_MATH[self.gates] * self.hidden

    @property
    def weights(self) -> int:
        """Weight elements, biases left out (one MAC per weight element and row)."""
        return self.macs

    @property
    def biases(self) -> int:
        """Bias elements (b_ih and b_hh), when the layer has biases."""
        return 2 * self.gates * self.hidden


def _gates(rows: int, hidden: int, name: str) -> int:
    if hidden <= 0 or rows % hidden:
        raise ArgumentError(f"{name}: {rows} gate rows for hidden size {hidden}")
    gates = rows // hidden
    if gates not in GATE_MATH:
        raise ArgumentError(f"{name}: {gates} gates")
    return gates


def stack(
    input_size: int, hidden: int, gates: int, num_layers: int, bidirectional: bool, proj: int = 0
) -> list[Layer]:
    """Every layer and direction of a stacked RNN."""
    if num_layers < 1 or hidden < 1 or input_size < 0:
        raise ArgumentError(f"RNN of {num_layers} layers, hidden size {hidden}")
    directions = 2 if bidirectional else 1
    layers = []
    for k in range(num_layers):
        size = input_size if k == 0 else directions * (proj or hidden)
        layers += [Layer(size, hidden, gates, proj)] * directions
    return layers


def rows_of(x: Shape) -> int:
    """Time steps times batch rows: the elements of the input over its last dimension."""
    return prod(x[:-1]) if len(x) > 1 else 1


def forward_flops(layers: list[Layer], rows: int) -> tuple[float, float]:
    """(FLOPs, MACs) of a forward over ``rows`` time steps and batch rows."""
    macs = rows * sum(layer.macs for layer in layers)
    return 2 * macs + rows * sum(layer.gate_math for layer in layers), macs


def backward_flops(
    layers: list[Layer], rows: int, input_grad: bool = True, weight_grad: bool = True
) -> tuple[float, float]:
    """(FLOPs, MACs) of a backward: data and weight gradients, gate math twice."""
    data = sum(layer.macs for layer in layers) - (0 if input_grad else layers[0].input_macs)
    weight = sum(layer.macs for layer in layers) if weight_grad else 0
    macs = rows * (data + weight)
    return 2 * macs + 2 * rows * sum(layer.gate_math for layer in layers), macs


def _tensor_bytes(a: OpArgs, positions) -> float:
    return sum(nbytes(a.shape(i), a.dtype(i)) for i in positions if a.is_tensor(i))


# --- CPU (oneDNN): one op per layer and direction


def _mkldnn_layer(a: OpArgs, hidden_pos: int) -> tuple[Layer, int]:
    x, w_ih, w_hh = a.shape(0), a.shape(1), a.shape(2)
    hidden = a.integer(hidden_pos)
    if len(w_ih) != 2 or len(w_hh) != 2 or not x or w_ih[1] != x[-1] or w_hh != (w_ih[0], hidden):
        raise ArgumentError(f"{a.name}: weights {w_ih}, {w_hh} for input {x}")
    return Layer(w_ih[1], hidden, _gates(w_ih[0], hidden, a.name)), rows_of(x)


@_R.formula("aten::mkldnn_rnn_layer", family=Family.RNN)
def mkldnn_rnn_layer(a: OpArgs) -> OpCost:
    """mkldnn_rnn_layer(input, weight0 (W_ih), weight1 (W_hh), weight2, weight3 (biases), hx_,
    cx_, reverse, batch_sizes, mode, hidden_size, num_layers, has_biases, bidirectional,
    batch_first, train)"""
    layer, rows = _mkldnn_layer(a, 10)
    flops, macs = forward_flops([layer], rows)
    dtype = a.dtype(0)
    writes = [((rows, layer.state), dtype)] + [(a.shape(i), a.dtype(i)) for i in (5, 6)]
    return a.cost(flops, macs, writes=writes, dtype=dtype)


@_R.formula("aten::mkldnn_rnn_layer_backward", family=Family.RNN)
def mkldnn_rnn_layer_backward(a: OpArgs) -> OpCost:
    """mkldnn_rnn_layer_backward(input, weight1..4, hx_, cx_tmp, output, hy_, cy_, grad_output,
    grad_hy, grad_cy, reverse, mode, hidden_size, num_layers, has_biases, train, bidirectional,
    batch_sizes, batch_first, workspace): gradients of the input, the weights, hx and cx."""
    layer, rows = _mkldnn_layer(a, 15)
    flops, macs = backward_flops([layer], rows)
    writes = [(a.shape(i), a.dtype(i)) for i in range(7) if a.is_tensor(i)]
    reads = _tensor_bytes(a, range(13))  # the workspace (argument 22) left out
    return a.cost(flops, macs, writes=writes, reads=reads, dtype=a.dtype(0))


# --- cuDNN and MIOpen: the whole stack in one op


class _Positions(msgspec.Struct, frozen=True):
    """Argument positions of a cuDNN / MIOpen RNN schema."""

    hx: int
    cx: int
    mode: int
    hidden: int
    proj: int | None
    layers: int
    bidirectional: int
    output_mask: int | None = None
    reads: tuple[int, ...] = ()  # the tensors read (besides the weights)


# _cudnn_rnn(input, weight[], weight_stride0, weight_buf?, hx, cx?, mode, hidden_size,
#   proj_size, num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state?)
_CUDNN = _Positions(4, 5, 6, 7, 8, 9, 13, reads=(0, 4, 5))
_CUDNN_NO_PROJ = _Positions(4, 5, 6, 7, None, 8, 12, reads=(0, 4, 5))  # PyTorch < 1.8
# _cudnn_rnn_backward(input, weight[], weight_stride0, weight_buf, hx, cx?, output, grad_output?,
#   grad_hy?, grad_cy?, mode, hidden_size, proj_size, num_layers, batch_first, dropout, train,
#   bidirectional, batch_sizes, dropout_state?, reserve, output_mask)
_CUDNN_BWD = _Positions(4, 5, 10, 11, 12, 13, 17, 21, reads=(0, 4, 5, 6, 7, 8, 9))
_CUDNN_BWD_NO_PROJ = _Positions(4, 5, 10, 11, None, 12, 16, 20, reads=(0, 4, 5, 6, 7, 8, 9))
# miopen_rnn(input, weight[], weight_stride0, hx, cx?, mode, hidden_size, num_layers, batch_first,
#   dropout, train, bidirectional, batch_sizes, dropout_state?)
_MIOPEN = _Positions(3, 4, 5, 6, None, 7, 11, reads=(0, 3, 4))
# miopen_rnn_backward(input, weight[], weight_stride0, weight_buf, hx, cx?, output, grad_output?,
#   grad_hy?, grad_cy?, mode, hidden_size, num_layers, batch_first, dropout, train,
#   bidirectional, batch_sizes, dropout_state?, reserve, output_mask)
_MIOPEN_BWD = _Positions(4, 5, 10, 11, None, 12, 16, 20, reads=(0, 4, 5, 6, 7, 8, 9))


def _backend_stack(a: OpArgs, p: _Positions) -> tuple[list[Layer], int]:
    x = a.shape(0)
    mode = a.integer(p.mode)
    if mode not in MODE_GATES:
        raise ArgumentError(f"{a.name}: unknown mode {mode}")
    proj = a.integer(p.proj, 0) if p.proj is not None else 0
    layers = stack(
        x[-1] if x else 0,
        a.integer(p.hidden),
        MODE_GATES[mode],
        a.integer(p.layers),
        a.flag(p.bidirectional),
        proj,
    )
    return layers, rows_of(x)


def _parameters(a: OpArgs, layers: list[Layer]) -> int:
    """Weight and bias elements; ``weight_stride0`` (argument 2) is the number of tensors per
    layer and direction: 4 or 5 (with a projection) with biases, 2 or 3 without."""
    biases = a.integer(2, 4) in (4, 5)
    return sum(layer.weights + (layer.biases if biases else 0) for layer in layers)


def _backend_forward(a: OpArgs, p: _Positions) -> OpCost:
    layers, rows = _backend_stack(a, p)
    flops, macs = forward_flops(layers, rows)
    dtype = a.dtype(0)
    directions = 2 if a.flag(p.bidirectional) else 1
    out = (rows, directions * layers[-1].state)
    states = [(a.shape(i), a.dtype(i)) for i in (p.hx, p.cx) if a.is_tensor(i)]
    reads = _tensor_bytes(a, p.reads) + nbytes((_parameters(a, layers),), dtype)
    return a.cost(flops, macs, writes=[(out, dtype)] + states, reads=reads, dtype=dtype)


def _backend_backward(a: OpArgs, p: _Positions) -> OpCost:
    layers, rows = _backend_stack(a, p)
    assert p.output_mask is not None  # the positions of a backward schema name it
    mask = a.flags(p.output_mask)
    if len(mask) != 4:
        raise ArgumentError(f"{a.name}: output_mask {mask}")
    flops, macs = backward_flops(layers, rows, input_grad=mask[0], weight_grad=mask[3])
    dtype = a.dtype(0)
    writes = [
        (a.shape(i), a.dtype(i))
        for i, need in ((0, mask[0]), (p.hx, mask[1]), (p.cx, mask[2]))
        if need and a.is_tensor(i)
    ]
    if mask[3]:
        writes.append(((_parameters(a, layers),), dtype))
    reads = _tensor_bytes(a, p.reads) + nbytes((_parameters(a, layers),), dtype)
    return a.cost(flops, macs, writes=writes, reads=reads, dtype=dtype)


@_R.formula("aten::_cudnn_rnn", family=Family.RNN)
def cudnn_rnn(a: OpArgs) -> OpCost:
    return _backend_forward(a, _CUDNN if len(a) >= 16 else _CUDNN_NO_PROJ)


@_R.formula("aten::_cudnn_rnn_backward", family=Family.RNN)
def cudnn_rnn_backward(a: OpArgs) -> OpCost:
    return _backend_backward(a, _CUDNN_BWD if len(a) >= 22 else _CUDNN_BWD_NO_PROJ)


@_R.formula("aten::miopen_rnn", family=Family.RNN)
def miopen_rnn(a: OpArgs) -> OpCost:
    return _backend_forward(a, _MIOPEN)


@_R.formula("aten::miopen_rnn_backward", family=Family.RNN)
def miopen_rnn_backward(a: OpArgs) -> OpCost:
    return _backend_backward(a, _MIOPEN_BWD)


@_R.formula("aten::_cudnn_rnn_flatten_weight", family=Family.MEMORY)
def cudnn_rnn_flatten_weight(a: OpArgs) -> OpCost:
    """_cudnn_rnn_flatten_weight(weight_arr[], ...): copies the weights into one buffer."""
    total = sum(prod(s) for s in a.tensor_list(0))
    return a.cost(flops=0, writes=[((total,), LIST_DTYPE)], dtype=LIST_DTYPE)


# --- layers from their parameter list: the composite ops and MPS


def params_stack(a: OpArgs, params_pos: int, gates: int, num_layers: int, bidirectional: bool) -> list[Layer]:
    """Layers from a parameter list ``[W_ih, W_hh, (b_ih, b_hh), (W_hr)] * layers * directions``."""
    params = a.tensor_list(params_pos)
    groups = num_layers * (2 if bidirectional else 1)
    if groups < 1 or len(params) % groups:
        raise ArgumentError(f"{a.name}: {len(params)} parameters for {groups} layers")
    per = len(params) // groups
    if per not in (2, 3, 4, 5):
        raise ArgumentError(f"{a.name}: {per} parameters per layer")
    layers = []
    for k in range(groups):
        group = params[k * per : (k + 1) * per]
        w_ih, w_hh = group[0], group[1]
        w_hr = group[-1] if per in (3, 5) else None
        if len(w_ih) != 2 or len(w_hh) != 2 or (w_hr is not None and len(w_hr) != 2):
            raise ArgumentError(f"{a.name}: parameter shapes {group}")
        hidden = w_ih[0] // gates
        if hidden * gates != w_ih[0] or w_hh[0] != w_ih[0]:
            raise ArgumentError(f"{a.name}: parameter shapes {group}")
        layers.append(Layer(w_ih[1], hidden, gates, w_hr[0] if w_hr is not None else 0))
    return layers


@_R.formula("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", family=Family.RNN, composite=True)
def rnn_layer(a: OpArgs) -> OpCost:
    """aten::lstm / gru / rnn_tanh / rnn_relu, overloads ``input`` (input, hx, params,
    has_biases, num_layers, dropout, train, bidirectional, batch_first) and ``data`` (data,
    batch_sizes, hx, params, has_biases, num_layers, dropout, train, bidirectional); and
    _lstm_mps (as ``input``)."""
    gates = _GATES_OF[a.name.split("::", 1)[1]]
    packed = a.is_tensor(1) and a.is_tensor_list(3)  # the ``data`` overload
    params_pos = 3 if packed else 2
    bidirectional = a.flag(params_pos + 5)
    layers = params_stack(a, params_pos, gates, a.integer(params_pos + 2), bidirectional)
    x = a.shape(0)
    if not x or x[-1] != layers[0].input_size:
        raise ArgumentError(f"{a.name}: input {x} for input size {layers[0].input_size}")
    rows, dtype = rows_of(x), a.dtype(0)
    flops, macs = forward_flops(layers, rows)
    out = (rows, (2 if bidirectional else 1) * layers[-1].state)
    return a.cost(flops, macs, writes=[(out, dtype)], dtype=dtype)


@_R.formula("aten::_lstm_mps", family=Family.RNN)
def lstm_mps(a: OpArgs) -> OpCost:
    return rnn_layer(a)


@_R.formula("aten::lstm_mps_backward", family=Family.RNN)
def lstm_mps_backward(a: OpArgs) -> OpCost:
    """lstm_mps_backward(grad_y?, grad_hy?, grad_cy?, z_state, cell_state_fwd, input,
    layersOutputs, hx[], params[], has_biases, num_layers, dropout, train, bidirectional,
    batch_first)"""
    layers = params_stack(a, 8, LSTM, a.integer(10), a.flag(13))
    x = a.shape(5)
    flops, macs = backward_flops(layers, rows_of(x))
    dtype = a.dtype(5)
    return a.cost(
        flops, macs, writes=[(x, dtype), ((sum(layer.weights for layer in layers),), dtype)], dtype=dtype
    )


# --- cells


def _cell(a: OpArgs, gates: int) -> tuple[Layer, int]:
    """lstm_cell(input, hx[], w_ih, w_hh, b_ih?, b_hh?); gru_cell / rnn_*_cell(input, hx, w_ih,
    w_hh, b_ih?, b_hh?)"""
    x, w_ih, w_hh = a.shape(0), a.shape(2), a.shape(3)
    hidden = w_ih[0] // gates if len(w_ih) == 2 else 0
    if not x or len(w_ih) != 2 or x[-1] != w_ih[1] or hidden * gates != w_ih[0] or w_hh != (w_ih[0], hidden):
        raise ArgumentError(f"{a.name}: weights {w_ih}, {w_hh} for input {x}")
    return Layer(w_ih[1], hidden, gates), rows_of(x)


def _cell_cost(a: OpArgs, gates: int, states: int) -> OpCost:
    layer, rows = _cell(a, gates)
    flops, macs = forward_flops([layer], rows)
    dtype = a.dtype(0)
    return a.cost(flops, macs, writes=[((rows, layer.hidden), dtype)] * states, dtype=dtype)


@_R.formula("aten::lstm_cell", family=Family.RNN, composite=True)
def lstm_cell(a: OpArgs) -> OpCost:
    return _cell_cost(a, LSTM, 2)


@_R.formula("aten::gru_cell", family=Family.RNN, composite=True)
def gru_cell(a: OpArgs) -> OpCost:
    return _cell_cost(a, GRU, 1)


@_R.formula("aten::rnn_tanh_cell", "aten::rnn_relu_cell", family=Family.RNN, composite=True)
def rnn_cell(a: OpArgs) -> OpCost:
    return _cell_cost(a, RNN, 1)


# --- fused gate math of the CUDA cells (their matrix products run before, as matmul ops)


def _gate_math_cost(a: OpArgs, gates: int, state_pos: int, times: int, outputs: int) -> OpCost:
    """``times`` x the gate math of a cell whose state (``[rows, H]``) is argument
    ``state_pos``."""
    h = a.shape(state_pos)
    if not h:
        raise ArgumentError(f"{a.name}: 0-d state")
    rows, hidden = rows_of(h), h[-1]
    dtype = a.dtype(state_pos)
    flops = times * rows * GATE_MATH[gates] * hidden
    return a.cost(flops, writes=[(h, dtype)] * outputs, dtype=dtype)


@_R.formula("aten::_thnn_fused_lstm_cell", family=Family.RNN)
def thnn_fused_lstm_cell(a: OpArgs) -> OpCost:
    """_thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy,
    cy, workspace)"""
    return _gate_math_cost(a, LSTM, 2, 1, 2)


@_R.formula(
    "aten::_thnn_fused_lstm_cell_backward", "aten::_thnn_fused_lstm_cell_backward_impl", family=Family.RNN
)
def thnn_fused_lstm_cell_backward(a: OpArgs) -> OpCost:
    """(grad_hy?, grad_cy?, cx, cy, workspace, has_bias) -> (grad_gates, grad_cx, ...)"""
    cost = _gate_math_cost(a, LSTM, 2, 2, 1)
    gates = a.shape(4)  # the workspace: [rows, 4H], the gates' gradient has its shape
    return OpCost(
        cost.flops, cost.macs, cost.bytes_read, cost.bytes_written + nbytes(gates, a.dtype(4)), cost.dtype
    )


@_R.formula("aten::_thnn_fused_gru_cell", family=Family.RNN)
def thnn_fused_gru_cell(a: OpArgs) -> OpCost:
    """_thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy,
    workspace)"""
    return _gate_math_cost(a, GRU, 2, 1, 1)


@_R.formula("aten::_thnn_fused_gru_cell_backward", family=Family.RNN)
def thnn_fused_gru_cell_backward(a: OpArgs) -> OpCost:
    """_thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias) -> (grad_input_gates,
    grad_hidden_gates, grad_hx, ...)"""
    return _gate_math_cost(a, GRU, 0, 2, 1)
