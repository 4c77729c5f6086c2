"""``LoopWeight`` (one GEMM for a loop weight's gradient) against plain autograd.

- In a recurrence whose steps feed each other, with every bias shape the decoder
  uses and a last step that gets no gradient: gradients of the weight, the bias
  and the inputs equal per-step ``torch.addmm`` (float64, to 1e-12); a retained
  graph gives the same gradients twice; without autograd it is a plain product.
- A batched weight (B x I x N, such as the attended keys): the gradient equals
  per-step ``bmm``.
- In the input-feeding decoder, for every window x score, one and two layers,
  with dropout: every parameter's gradient equals the same model with the loop
  weights replaced by per-step ``addmm`` and the step's attention by the plain
  path (no fused node, attention_step.py), in float64.
"""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters

from luong_plugin.modules import luong_loop
from luong_plugin.modules.loop_weight import LoopWeight
from luong_plugin.modules.scores import SCORES as SCORE_NAMES
from luong_plugin.modules.windows import WINDOWS as WINDOW_NAMES


class PlainLoopWeight:
    """The oracle: autograd's own per-step products."""

    def __init__(self, weight_t):
        self.weight_t = weight_t

    def addmm(self, bias, inputs):
        if bias is None:
            return inputs.mm(self.weight_t)
        return torch.addmm(bias, inputs, self.weight_t)


def _recurrence(loop_weight_cls, W, bias, x0, bias_kind, retain=False):
    weight = loop_weight_cls(W.t())  # the decoder passes transposed views too
    x, outs = x0, []
    for t in range(6):
        b = {"rows": bias.expand(x.size(0), -1) * (t + 1), "vector": bias, "none": None}[bias_kind]
        y = torch.tanh(weight.addmm(b, x))  # B x N
        outs.append(y)
        x = torch.cat([y, x[:, : x.size(1) - y.size(1)]], dim=1)  # B x I: fed back
    loss = sum((o.pow(2) * (i + 1)).sum() for i, o in enumerate(outs[:-1]))  # last unused
    params = [W, x0] + ([bias] if bias_kind != "none" else [])
    grads = torch.autograd.grad(loss, params, retain_graph=retain)
    if retain:
        return grads, torch.autograd.grad(loss, params)
    return grads


@pytest.mark.parametrize("bias_kind", ["rows", "vector", "none"])
def test_loop_weight_gradients_equal_per_step_addmm(bias_kind):
    g = torch.Generator().manual_seed(0)
    W = torch.randn(5, 8, dtype=torch.float64, generator=g).requires_grad_()  # N x I
    bias = torch.randn(5, dtype=torch.float64, generator=g).requires_grad_()
    x0 = torch.randn(4, 8, dtype=torch.float64, generator=g).requires_grad_()
    plain = _recurrence(PlainLoopWeight, W, bias, x0, bias_kind)
    taped = _recurrence(LoopWeight, W, bias, x0, bias_kind)
    for p, q in zip(plain, taped):
        torch.testing.assert_close(q, p, atol=1e-12, rtol=0)
    first, second = _recurrence(LoopWeight, W, bias, x0, bias_kind, retain=True)
    for p, q, r in zip(plain, first, second):
        torch.testing.assert_close(q, p, atol=1e-12, rtol=0)
        torch.testing.assert_close(r, p, atol=1e-12, rtol=0)


def test_batched_loop_weight_gradients_equal_per_step_bmm():
    g = torch.Generator().manual_seed(1)
    keys = torch.randn(3, 4, 7, dtype=torch.float64, generator=g).requires_grad_()  # B x I x N
    x0 = torch.randn(3, 1, 4, dtype=torch.float64, generator=g).requires_grad_()  # B x 1 x I
    grads = []
    for taped in (False, True):
        weight = LoopWeight(keys) if taped else None
        x, loss = x0, 0.0
        for t in range(5):
            y = weight.addmm(None, x) if taped else x.bmm(keys)  # B x 1 x N
            loss = loss + (y.tanh() * (t + 1)).sum()
            x = torch.tanh(y[..., :4] + x)  # B x 1 x I: fed back
        grads.append(torch.autograd.grad(loss, [keys, x0]))
    for p, q in zip(*grads):
        torch.testing.assert_close(q, p, atol=1e-12, rtol=0)


def test_loop_weight_without_autograd_is_a_plain_product():
    W = torch.randn(3, 4, requires_grad=True)
    x = torch.randn(2, 4)
    with torch.no_grad():
        weight = LoopWeight(W.t())
        out = weight.addmm(torch.ones(3), x)
    assert not weight.taped and out.grad_fn is None
    torch.testing.assert_close(out, x @ W.t() + 1)


def _grads(model, src, lengths, prev, seed):
    model.zero_grad()
    torch.manual_seed(seed)  # the same dropout masks on both paths
    logits, _ = model(src, lengths, prev)
    logits.log_softmax(-1).mean().backward()
    return logits.detach(), {
        n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
    }


WINDOWS_SCORES = [(w, s) for w in WINDOW_NAMES for s in SCORE_NAMES]


@pytest.mark.parametrize("layers", [1, 2])
@pytest.mark.parametrize("window,score", WINDOWS_SCORES, ids=lambda v: str(v))
def test_input_feeding_decoder_gradients_equal_plain_autograd(window, score, layers, monkeypatch):
    model = build(
        "luong_tiny", attention_window=window, attention_score=score, input_feeding=True,
        dropout=0.2, encoder_layers=layers, decoder_layers=layers,
    )  # fmt: skip
    model = spread_parameters(model).double().train()
    src, lengths = random_batch(model.encoder.dictionary, [11, 3, 7])
    prev = random_prev_output(model.decoder.dictionary, 3, 8)
    taped_logits, taped = _grads(model, src, lengths, prev, seed=5)
    monkeypatch.setattr(luong_loop, "LoopWeight", PlainLoopWeight)
    monkeypatch.setattr(luong_loop, "step_source", lambda *args: None)
    plain_logits, plain = _grads(model, src, lengths, prev, seed=5)
    torch.testing.assert_close(taped_logits, plain_logits, atol=0, rtol=0)
    assert taped.keys() == plain.keys()
    assert len(plain) == len([p for p in model.parameters() if p.requires_grad])
    for name in plain:
        torch.testing.assert_close(taped[name], plain[name], atol=1e-10, rtol=1e-10, msg=name)


def test_input_feeding_decoder_trains_under_autocast(monkeypatch):
    """fairseq's --amp runs the forward under autocast: half-precision products with
    fp32 weights. The taped backward must accept that mix and match plain autograd."""
    model = spread_parameters(build("luong_tiny", attention_window="global", input_feeding=True))
    src, lengths = random_batch(model.encoder.dictionary, [9, 4])
    prev = random_prev_output(model.decoder.dictionary, 2, 6)
    grads = {}
    for name, cls in (("taped", LoopWeight), ("plain", PlainLoopWeight)):
        monkeypatch.setattr(luong_loop, "LoopWeight", cls)
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits, _ = model(src, lengths, prev)
        logits.float().log_softmax(-1).mean().backward()
        grads[name] = {n: p.grad.clone() for n, p in model.named_parameters()}
        assert all(g.dtype == torch.float32 for g in grads[name].values())
    for n in grads["plain"]:
        torch.testing.assert_close(
            grads["taped"][n], grads["plain"][n], atol=2e-2, rtol=2e-2, msg=n
        )
