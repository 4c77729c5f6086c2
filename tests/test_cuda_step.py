"""The input-feeding loop's CUDA step (luong_loop.fused_lstm_cell): torch's fused LSTM cell
kernel against the LSTM equations written out, and the whole fast loop on CUDA against the
paper's loop. These run where a GPU is present (the GPU benchmark's test run,
bench/gpu_run.sh with TESTS=1); on a CPU the loop takes the plain step, which
test_fast_paths.py holds to the same reference."""

import pytest
import torch
from conftest import (
    assert_fast_loop_equals_the_paper_loop,
    build,
    random_batch,
    random_prev_output,
)
from test_luong_model import decode_incrementally

from luong_plugin.modules import luong_loop

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")


def lstm_equations(gates_in, gates_h, c):
    """c_t = σ(f) ∘ c_{t-1} + σ(i) ∘ tanh(g), h_t = σ(o) ∘ tanh(c_t), gates i, f, g, o of
    gates_in + gates_h (B x 4H each), element by element in float64."""
    z = gates_in.double() + gates_h.double()  # B x 4H
    H = c.size(1)
    i, f, g, o = (z[:, k * H : (k + 1) * H] for k in range(4))  # B x H each
    sigmoid = lambda x: 1 / (1 + torch.exp(-x))  # noqa: E731
    c_t = sigmoid(f) * c.double() + sigmoid(i) * torch.tanh(g)
    return sigmoid(o) * torch.tanh(c_t), c_t


@pytest.mark.parametrize("gate_dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_cuda_fused_cell_equals_the_lstm_equations(gate_dtype):
    """Values and gradients; c_t and h_t come back in fp32 whatever the gates' dtype, and
    under bf16 autocast too (precision.py: the recurrent state stays fp32)."""
    torch.manual_seed(0)
    B, H = 5, 24
    gates_in = torch.randn(B, 4 * H, device="cuda").to(gate_dtype).requires_grad_()
    gates_h = torch.randn(B, 4 * H, device="cuda").to(gate_dtype).requires_grad_()
    c = torch.randn(B, H, device="cuda", requires_grad=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        h_t, c_t = luong_loop.fused_lstm_cell(gates_in, gates_h, c)
    assert h_t.dtype == c_t.dtype == torch.float32
    ref_h, ref_c = lstm_equations(gates_in, gates_h, c)
    torch.testing.assert_close(h_t.double(), ref_h, atol=1e-6, rtol=0)
    torch.testing.assert_close(c_t.double(), ref_c, atol=1e-6, rtol=0)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[gate_dtype]
    weights = torch.randn(2, B, H, device="cuda", dtype=torch.float64)
    grads = torch.autograd.grad((h_t * weights[0] + c_t * weights[1]).sum(), (gates_in, gates_h, c))
    ref = torch.autograd.grad(
        (ref_h * weights[0] + ref_c * weights[1]).sum(), (gates_in, gates_h, c)
    )
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got.double(), want.double(), atol=tol, rtol=tol)


@pytest.mark.parametrize("window", ["global", "local-m", "local-p"])
def test_cuda_fast_loop_equals_the_paper_loop(window):
    """float64 on CUDA, training with dropout: every output and every gradient."""
    assert luong_loop.FUSED_CELL
    model = build(attention_window=window, attention_score="general", input_feeding=True,
                  window_size=2, dropout=0.3)  # fmt: skip
    assert_fast_loop_equals_the_paper_loop(model, [9, 4, 7], device="cuda")


@pytest.mark.parametrize("window", ["global", "local-p"])
def test_cuda_incremental_decoding_equals_the_full_forward(window):
    """Beam search's path on CUDA (no autograd, one step at a time, the step weights kept
    in the incremental state) against the full forward, fp32."""
    model = build(attention_window=window, attention_score="general", input_feeding=True)
    model = model.cuda().eval()
    src, lengths = (t.cuda() for t in random_batch(model.encoder.dictionary, [9, 4, 6]))
    prev = random_prev_output(model.decoder.dictionary, 3, 7).cuda()
    with torch.no_grad():
        full, _ = model(src, lengths, prev)  # B x T x V
        steps, _ = decode_incrementally(model, src, lengths, prev)  # B x T x V
    torch.testing.assert_close(steps, full, atol=1e-5, rtol=0)
