"""``--criterion fused_label_smoothed_cross_entropy`` against fairseq's own
``label_smoothed_cross_entropy``: the same loss, logged figures and gradient
of every parameter, for our models and fairseq's lstm, padded batches, label
smoothing on and off, one chunk and many; no gradient work under no_grad
(validation); in float64 against the plain formula (log-softmax of W x + b,
fairseq's ``label_smoothed_nll_loss``) to 1e-10; through fairseq-train to the
same validation figures; and a clear error for what it cannot fuse.
"""

import argparse

import pytest
import torch
from conftest import TinyTask, build, random_batch, random_prev_output, spread_parameters, train
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    label_smoothed_nll_loss,
)

from luong_plugin.criterions.fused_cross_entropy import (
    FusedLabelSmoothedCrossEntropyCriterion,
    fused_output_loss,
)
from luong_plugin.modules.options import OptionError

TARGET_LENGTHS = [9, 3, 6, 1]  # real tokens per sentence, padded to 9


def _sample(model, seed=0):
    src, src_lengths = random_batch(
        model.encoder.dictionary, [9, 7, 5, 2], seed=seed
    )  # sorted, as fairseq batches
    tgt_dict = model.decoder.dictionary
    prev = random_prev_output(tgt_dict, len(TARGET_LENGTHS), max(TARGET_LENGTHS), seed=seed + 1)
    target = torch.roll(prev, -1, dims=1)  # B x T
    for b, n in enumerate(TARGET_LENGTHS):
        target[b, n - 1] = tgt_dict.eos()
        target[b, n:] = tgt_dict.pad()
        prev[b, n:] = tgt_dict.pad()
    return {
        "net_input": {"src_tokens": src, "src_lengths": src_lengths, "prev_output_tokens": prev},
        "target": target,
        "ntokens": sum(TARGET_LENGTHS),
    }


def _fairseq_lstm(share: bool):
    from fairseq.models.lstm import LSTMModel, base_architecture

    args = argparse.Namespace(
        encoder_embed_dim=16, encoder_hidden_size=16, encoder_layers=1,
        decoder_embed_dim=16, decoder_hidden_size=16, decoder_out_embed_dim=16,
        decoder_layers=1, decoder_attention="True", dropout=0.0,
        share_decoder_input_output_embed=share, criterion="label_smoothed_cross_entropy",
    )  # fmt: skip
    base_architecture(args)
    conftest_model = build("luong_tiny")  # its dictionaries
    task = TinyTask(conftest_model.encoder.dictionary, conftest_model.decoder.dictionary)
    return LSTMModel.build_model(args, task)


MODELS = {
    "luong global": lambda: build("luong_tiny", attention_window="global"),
    "luong local-p shared": lambda: build(
        "luong_tiny",
        attention_window="local-p",
        decoder_out_embed_dim=24,
        decoder_embed_dim=24,
        share_decoder_input_output_embed=True,
    ),
    "bahdanau": lambda: build("bahdanau_tiny"),
    "fairseq lstm": lambda: _fairseq_lstm(share=False),
    "fairseq lstm shared": lambda: _fairseq_lstm(share=True),
}


def _criteria(model, eps, chunk, **kw):
    task = TinyTask(model.encoder.dictionary, model.decoder.dictionary)
    plain = LabelSmoothedCrossEntropyCriterion(task, False, eps, **kw)
    fused = FusedLabelSmoothedCrossEntropyCriterion(task, False, eps, loss_chunk_tokens=chunk, **kw)
    return plain, fused


def _run(criterion, model, sample):
    torch.manual_seed(1)  # the same dropout masks on both runs
    model.zero_grad()
    loss, sample_size, logged = criterion(model, sample)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), sample_size, logged, grads


@pytest.mark.parametrize("chunk", [1024, 4], ids=["one-chunk", "chunks-of-4"])
@pytest.mark.parametrize("eps", [0.1, 0.0])
@pytest.mark.parametrize("name", MODELS)
def test_fused_loss_equals_fairseqs(name, eps, chunk):
    model = spread_parameters(MODELS[name]()).train()
    sample = _sample(model)
    plain, fused = _criteria(model, eps, chunk, report_accuracy=True)
    want, got = _run(plain, model, sample), _run(fused, model, sample)
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-5)
    assert got[1] == want[1] == sum(TARGET_LENGTHS)
    for key in ("loss", "nll_loss"):
        torch.testing.assert_close(got[2][key], want[2][key], atol=1e-4, rtol=1e-5, msg=key)
    for key in ("ntokens", "nsentences", "sample_size", "n_correct", "total"):
        assert int(got[2][key]) == int(want[2][key]), key
    assert got[3].keys() == want[3].keys()
    assert len(got[3]) == len([p for p in model.parameters() if p.requires_grad])
    for param in want[3]:
        torch.testing.assert_close(got[3][param], want[3][param], atol=1e-5, rtol=1e-4, msg=param)


def test_fused_loss_without_gradients_and_with_a_prefix_ignored(monkeypatch):
    model = spread_parameters(build("luong_tiny")).eval()
    sample = _sample(model)
    plain, fused = _criteria(model, 0.1, 5, ignore_prefix_size=2)
    softmax_products = []  # the gradient's products with softmax(z): none under no_grad
    mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda *a, **k: softmax_products.append(1) or mm(*a, **k))
    with torch.no_grad():
        want, got = plain(model, sample), fused(model, sample)
    assert softmax_products == []
    torch.testing.assert_close(got[0], want[0], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(got[2]["nll_loss"], want[2]["nll_loss"], atol=1e-4, rtol=1e-5)
    assert not got[0].requires_grad
    got = fused(model, sample)  # with autograd on: one product per chunk of 5 tokens
    counted = int(sample["target"][:, 2:].ne(model.decoder.dictionary.pad()).sum())  # 12
    assert len(softmax_products) == -(-counted // 5) == 3


@pytest.mark.slow
def test_fairseq_train_with_the_fused_loss(bible, tmp_path):
    """fairseq-train parses the criterion's options, trains, validates and logs as the
    stock criterion does, on the same updates to the same figures."""
    valid = []
    for criterion, extra in [
        ("label_smoothed_cross_entropy", []),
        ("fused_label_smoothed_cross_entropy", ["--loss-chunk-tokens", "100"]),
    ]:
        log = train(
            bible / "bin", tmp_path / criterion, "--criterion", criterion,
            "--label-smoothing", "0.1", "--report-accuracy", "--dropout", "0", *extra, updates=6,
        )  # fmt: skip
        valid.append(_valid_line(log))  # fairseq-train validates when it stops
    plain, fused = valid
    assert plain.keys() == fused.keys() >= {"loss", "nll_loss", "ppl", "accuracy"}
    for key in ("loss", "nll_loss", "ppl", "accuracy"):
        assert (
            abs(float(plain[key]) - float(fused[key])) <= 0.02 * abs(float(plain[key])) + 0.01
        ), key


def _valid_line(log: str) -> dict:
    """The figures of the last '| valid on ...' line of a fairseq-train log."""
    lines = [line for line in log.splitlines() if "| valid on" in line]
    assert lines, log[-2000:]
    fields = lines[-1].split("|")[2:]
    return dict(f.strip().split(" ", 1) for f in fields if " " in f.strip())


def _plain_formula(features, weight, bias, target, eps):
    logits = torch.nn.functional.linear(features, weight, bias)  # N x V
    log_probs = torch.log_softmax(logits, dim=-1)
    loss, nll = label_smoothed_nll_loss(log_probs, target, eps, ignore_index=None)
    return loss, nll


@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no-bias"])
def test_fused_loss_gradients_equal_the_formula_in_float64(with_bias):
    g = torch.Generator().manual_seed(0)
    N, C, V = 23, 6, 11
    features = torch.randn(N, C, generator=g, dtype=torch.float64) * 3
    weight = torch.randn(V, C, generator=g, dtype=torch.float64)
    bias = torch.randn(V, generator=g, dtype=torch.float64) if with_bias else None
    target = torch.randint(0, V, (N,), generator=g)
    results = []
    for fused in (False, True):
        leaves = [t.clone().requires_grad_() for t in (features, weight, bias) if t is not None]
        x, w, *b = leaves
        if fused:
            loss, nll, correct = fused_output_loss(x, w, b[0] if b else None, target, 0.1, 5, True)
            assert int(correct) == int((torch.nn.functional.linear(features, weight, bias)
                                        .argmax(-1) == target).sum())  # fmt: skip
        else:
            loss, nll = _plain_formula(x, w, b[0] if b else None, target, 0.1)
        (loss * 0.7).backward()  # a scaled loss, as fairseq's trainer may scale it
        results.append((loss.detach(), nll.detach(), [t.grad for t in leaves]))
    (loss_p, nll_p, grads_p), (loss_f, nll_f, grads_f) = results
    torch.testing.assert_close(loss_f, loss_p, atol=1e-10, rtol=0)
    torch.testing.assert_close(nll_f, nll_p, atol=1e-10, rtol=0)
    for a, b in zip(grads_f, grads_p):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_fused_loss_of_far_apart_logits_in_low_precision(dtype):
    """Logits hundreds apart, where the target's probability underflows fp32 (exp(-300)):
    the loss and nll stay finite and equal the formula in float64 on the logits as the
    dtype's products (chunk by chunk, as the loss computes them) round them, to fp32's
    rounding; the gradients equal the float64 chain rule from those logits to the dtype's."""
    g = torch.Generator().manual_seed(1)
    N, C, V = 12, 4, 9
    features = torch.randn(N, C, generator=g, dtype=torch.float64)
    weight = torch.randn(V, C, generator=g, dtype=torch.float64) * 100  # logits ~ ±300
    bias = torch.randn(V, generator=g, dtype=torch.float64) * 100
    target = torch.nn.functional.linear(features, weight, bias).argmin(-1)  # N
    f, w, b = (t.to(dtype).requires_grad_() for t in (features, weight, bias))
    chunk = 5
    logits = torch.cat([torch.addmm(b, f[i : i + chunk], w.t()) for i in range(0, N, chunk)])
    logits = logits.detach().double().requires_grad_()  # N x V, as the dtype's products give
    assert torch.softmax(logits.float(), -1).gather(1, target.unsqueeze(1)).max() == 0
    loss, nll, _ = fused_output_loss(f, w, b, target, 0.1, chunk)
    loss.backward()
    assert loss.dtype == nll.dtype == torch.float32  # sums in fp32, as fairseq's log-softmax
    ref_loss, ref_nll = label_smoothed_nll_loss(
        torch.log_softmax(logits, -1), target, 0.1, ignore_index=None
    )
    torch.testing.assert_close(loss.double(), ref_loss.detach(), atol=0, rtol=1e-6)
    torch.testing.assert_close(nll.double(), ref_nll, atol=0, rtol=1e-6)
    (grad_z,) = torch.autograd.grad(ref_loss, logits)  # N x V
    x, weight_t = f.detach().double(), w.detach().double()  # the rounded inputs
    refs = (grad_z.mm(weight_t), grad_z.t().mm(x), grad_z.sum(0))  # ∂/∂x, ∂/∂W, ∂/∂b
    tol = {torch.float32: 1e-5, torch.bfloat16: 1e-2}[dtype]
    for got, ref in zip((f, w, b), refs):
        torch.testing.assert_close(got.grad.double(), ref, atol=tol * ref.abs().max(), rtol=0)


def test_fused_loss_refuses_what_it_cannot_fuse():
    model = build("luong_tiny")
    task = TinyTask(model.encoder.dictionary, model.decoder.dictionary)
    with pytest.raises(OptionError, match="--loss-chunk-tokens must be a positive integer"):
        FusedLabelSmoothedCrossEntropyCriterion(task, False, 0.1, loss_chunk_tokens=0)
    fused = FusedLabelSmoothedCrossEntropyCriterion(task, False, 0.1)

    class Other(torch.nn.Module):  # a model whose decoder is not one we know
        decoder = torch.nn.Identity()

    with pytest.raises(OptionError, match="use --criterion label_smoothed_cross_entropy"):
        fused(Other(), _sample(model))
    with pytest.raises(OptionError, match="no per-token losses"):
        fused(model, _sample(model), reduce=False)
