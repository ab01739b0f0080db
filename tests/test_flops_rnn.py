"""Recurrent layers captured on CPU: LSTM (oneDNN's ``aten::mkldnn_rnn_layer``), GRU and RNN (run
as linear layers and gate math inside ``aten::gru`` / ``aten::rnn_tanh``), LSTM and GRU cells.

The model runs forward and backward under traceprof.capture (torch.profiler with
``record_shapes=True``); the analysis must count the RNN ops, list no view, metadata or
predicate op as unsupported, and give forward FLOPs within 10% of the gate GEMMs:
``8 H (I + H)`` per time step and batch row for an LSTM layer, ``6 H (I + H)`` for a GRU,
``2 H (I + H)`` for an RNN. ``FlopCounterMode`` has no entry for ``aten::mkldnn_rnn_layer``
(it counts 0); with oneDNN turned off the same LSTM runs as matrix products that it does
count, which checks the GEMM part of the formula exactly.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import traceprof  # noqa: E402
from traceprof.analysis.link import link  # noqa: E402
from traceprof.analysis.op_costs import count_ops  # noqa: E402
from traceprof.capture import profile_once  # noqa: E402
from traceprof.flops import REGISTRY, Family  # noqa: E402

I, H, T, B = 32, 64, 6, 4  # noqa: E741 - PyTorch's names for them: input size, hidden size, time steps, batch
ROWS = T * B
TOLERANCE = 0.10


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(I, H, num_layers=2)
        self.gru = nn.GRU(H, H)
        self.rnn = nn.RNN(H, H)
        self.lstm_cell = nn.LSTMCell(H, H)
        self.gru_cell = nn.GRUCell(H, H)
        self.head = nn.Linear(H, 10)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        y, _ = self.rnn(y)
        state = None
        for t in range(y.shape[0]):
            state = self.lstm_cell(y[t], state)
        return self.head(self.gru_cell(state[0]))


def gemm_flops(gates: int, input_size: int, hidden: int) -> int:
    """FLOPs of one layer's gate matrix products per time step and batch row."""
    return 2 * gates * hidden * (input_size + hidden)


#: module -> analytic forward FLOPs (gate GEMMs only)
ANALYTIC = {
    "lstm": ROWS * (gemm_flops(4, I, H) + gemm_flops(4, H, H)),  # 8 H (I + H), two layers
    "gru": ROWS * gemm_flops(3, H, H),  # 6 H (I + H)
    "rnn": ROWS * gemm_flops(1, H, H),  # 2 H (I + H)
    "lstm_cell": ROWS * gemm_flops(4, H, H),  # T calls of B rows
    "gru_cell": B * gemm_flops(3, H, H),
}


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        model = Recurrent()
        x = torch.randn(T, B, I)
        path = profile_once(
            model, x, backward=True, path=tmp_path_factory.mktemp("rnn") / "trace.pt.trace.json.gz"
        )
    finally:
        torch.set_num_threads(threads)
    trace = traceprof.load_trace(path)
    return trace, traceprof.analyze(trace)


def test_the_rnn_ops_are_counted(captured):
    trace, _ = captured
    costs = count_ops(trace, link(trace))
    names = trace.events.names
    counted = {names[trace.events.name[e]] for e in costs.counted.tolist()}
    rnn = {n for n in counted if REGISTRY.get(n).family is Family.RNN}
    # oneDNN's LSTM layer and its backward, one per layer
    assert {"aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward"} <= rnn, counted
    # GRU, RNN and the cells run as linear layers and gate math on CPU: those are counted, and
    # the composite ops around them are not counted a second time
    assert {"aten::linear", "aten::sigmoid_", "aten::tanh"} <= counted
    assert not counted & {"aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::lstm_cell", "aten::gru_cell"}


def test_no_view_metadata_or_rnn_op_is_unsupported(captured):
    _, profile = captured
    profile.self_check()
    listed = [u.name for u in profile.flops.unsupported]
    # before: aten::unsafe_chunk (the cells' gate split), aten::cudnn_is_acceptable
    assert listed == [], listed
    no_cost = [n for n in listed if (e := REGISTRY.get(n.split(" ")[0])) and e.family is Family.NO_COST]
    assert no_cost == []
    text = traceprof.render.render(profile, "tree", traceprof.render.RenderOptions(unsupported_ops=True))
    assert "aten::unsafe_chunk" not in text and "cudnn_is_acceptable" not in text


@pytest.mark.parametrize("module", list(ANALYTIC))
def test_forward_flops_are_the_gate_gemms_within_10_percent(captured, module):
    _, profile = captured
    got = profile.find(module).forward.total.flops
    want = ANALYTIC[module]
    assert got >= want  # the gate math comes on top
    assert abs(got - want) / want <= TOLERANCE, f"{module}: {got} vs {want}"


def test_backward_is_about_twice_the_forward(captured):
    _, profile = captured
    lstm = profile.find("lstm")
    # oneDNN's backward: data and weight gradients, both layers, gate math twice
    assert lstm.backward.total.flops == pytest.approx(2 * lstm.forward.total.flops, rel=1e-9)
    for module in ("gru", "rnn", "lstm_cell"):
        node = profile.find(module)
        ratio = node.backward.total.flops / node.forward.total.flops
        assert 1.5 <= ratio <= 2.5, f"{module}: backward / forward {ratio}"


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_lstm_gemms_equal_flopcountermode_on_the_same_lstm_run_as_matrix_products(captured):
    """FlopCounterMode counts 0 for oneDNN's LSTM; with oneDNN off, the LSTM runs as addmm/mm,
    which it counts: their FLOPs are exactly traceprof's MACs x 2 for the oneDNN layer."""
    _, profile = captured
    torch.manual_seed(0)
    lstm = nn.LSTM(I, H, num_layers=2)
    x = torch.randn(T, B, I, requires_grad=True)
    with FlopCounterMode(display=False) as counter:
        lstm(x)
    assert counter.get_total_flops() == 0  # no formula for aten::mkldnn_rnn_layer
    with torch.backends.mkldnn.flags(enabled=False):
        with FlopCounterMode(display=False) as counter:
            y, _ = lstm(x)
        forward = counter.get_total_flops()
        with FlopCounterMode(display=False) as counter:
            y.sum().backward()
        backward = counter.get_total_flops()
    node = profile.find("lstm")
    assert 2 * node.forward.total.macs == forward == ANALYTIC["lstm"]
    # the backward computes every gradient once more per product; autograd skips the gradient
    # of the initial state (zeros, no grad): one step's recurrent data gradient per layer
    skipped = 2 * (2 * B * 4 * H * H)
    assert 2 * node.backward.total.macs == backward + skipped
