"""bf16 mixed precision (``--precision bf16``, luong_plugin/modules/precision.py)
against fp32 on the same weights, for every model variant, on the CPU and, where
one is present, on a GPU.

Tolerances (bf16 keeps 8 significant bits, a relative rounding of 2^-9 ≈ 0.002
per product, accumulated in fp32): logits within 2% of their largest magnitude,
attention weights within 0.02, p_t within 1% of the source length, the
gradient within 2% (relative L2 norm; 10% for each parameter that carries at
least 1% of it), the loss of every update of a 50-update run within 3%
(measured worst cases over three seeds and every variant: 0.4% and 6.7% for the
gradients). The fp32 runs are the reference; bf16 runs must also
differ from them, which shows the products really ran in bf16.
"""

import pytest
import torch
import torch.nn.functional as F
from conftest import (
    USER_DIR,
    VARIANTS,
    batch,
    build,
    close,
    fairseq,
    generate,
    parse,
    spread_parameters,
    steps_to_compare,
    train,
)
from fairseq import checkpoint_utils
from torch.utils._python_dispatch import TorchDispatchMode

from luong_plugin.analysis.generate_output import parse_generate
from luong_plugin.criterions.fused_cross_entropy import fused_output_loss
from luong_plugin.modules import precision
from luong_plugin.modules.options import OptionError

LOGIT_TOL = 0.02  # x max |logit|
ATTN_TOL = 0.02
P_T_TOL = 0.01  # x S_b
GRAD_TOL = 0.02  # relative L2 norm, all parameters together
PARAM_GRAD_TOL = 0.1  # relative L2 norm, each parameter with >= 1% of the gradient
LOSS_TOL = 0.03


def _devices():
    cpu = pytest.param(
        "cpu",
        marks=pytest.mark.skipif(
            not precision.cpu_has_native_bf16(), reason="this CPU has no native bf16"
        ),
    )
    cuda = pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not (torch.cuda.is_available() and torch.cuda.is_bf16_supported()),
            reason="no GPU with bf16",
        ),
    )
    return [cpu, cuda]


@pytest.fixture(params=_devices())
def device(request):
    return torch.device(request.param)


def pair(options, device, seed=0, spread=True):
    """The same weights as an fp32 and a bf16 model, on ``device``: spread wide
    (attention far from uniform), or each model's own initialisation."""
    options = dict(options)
    arch = options.pop("arch", "luong_tiny")
    models = []
    for name in ("fp32", "bf16"):
        torch.manual_seed(seed)
        model = build(arch, precision=name, dropout=0.0, **options)
        if spread:
            spread_parameters(model, seed)
        models.append(model.to(device))
    return models


@pytest.mark.parametrize("options", VARIANTS)
def test_bf16_forward_close_to_fp32(options, device):
    fp32, bf16 = pair(options, device)
    src, lengths, prev = batch(fp32, device)
    with torch.no_grad():
        logits32, extra32 = fp32(src, lengths, prev)
        logits16, extra16 = bf16(src, lengths, prev)
    assert logits32.dtype == torch.float32 and logits16.dtype == torch.bfloat16
    steps = steps_to_compare(logits32, extra32, extra16, lengths, P_T_TOL)  # B x T
    scale = logits32.abs().max().item()
    diff = (logits16.float() - logits32)[steps]
    assert diff.abs().max().item() <= LOGIT_TOL * scale, diff.abs().max()
    assert not torch.equal(logits16.float(), logits32)  # bf16 did run
    attn32, attn16 = extra32["attn"][0], extra16["attn"][0]
    assert (attn32 is None) == (attn16 is None)
    if attn32 is not None:
        gap = (attn16.float() - attn32)[steps]
        assert gap.abs().max().item() <= ATTN_TOL, gap.abs().max()


def _nll(model, src, lengths, prev):
    logits, _ = model(src, lengths, prev)
    target = torch.roll(prev, -1, dims=1)
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), reduction="sum")


@pytest.mark.parametrize("options", VARIANTS)
def test_bf16_gradients_close_to_fp32(options, device):
    """From each model's own initialisation (where training starts): the whole
    gradient within GRAD_TOL, and each parameter that carries at least 1% of it
    within PARAM_GRAD_TOL (smaller ones are rounding noise either way)."""
    fp32, bf16 = pair(options, device, spread=False)
    src, lengths, prev = batch(fp32, device)
    for model in (fp32, bf16):
        model.train()
        _nll(model, src, lengths, prev).backward()
    for p16 in bf16.parameters():
        assert p16.dtype == torch.float32 and p16.grad.dtype == torch.float32  # fp32 master
    whole32 = torch.cat([p.grad.flatten() for p in fp32.parameters()])
    whole16 = torch.cat([p.grad.flatten() for p in bf16.parameters()])
    error = ((whole16 - whole32).norm() / whole32.norm()).item()
    assert 0 < error <= GRAD_TOL, f"relative gradient error {error:.4f}"
    for (name, p32), p16 in zip(fp32.named_parameters(), bf16.parameters()):
        norm = p32.grad.norm()
        if norm >= 0.01 * whole32.norm():
            error = ((p16.grad - p32.grad).norm() / norm).item()
            assert error <= PARAM_GRAD_TOL, f"{name}: relative gradient error {error:.3f}"


def test_eq9_products_run_in_fp32_on_a_cpu_under_bf16(monkeypatch):
    """Local-p's eq. (9) in the training loop multiplies in fp32 on a CPU under bf16
    (``luong_loop.position_dtype``), in the loop's bf16 with ``POSITION_FP32_ON_CPU``
    off, while the loop's product dtype stays bf16; and under autocast (the plain path's
    ``PositionStep``) eq. (9)'s products keep their operands' dtypes, p_t equal to the one
    computed without autocast: fp32 weights stay fp32, and with a bf16 W_p (CUDA's case) the
    logit stays fp32."""
    from luong_plugin.modules import luong_loop
    from luong_plugin.modules.position_network import position_step
    from luong_plugin.modules.windows import LocalPredictiveWindow

    asked, loop_weights = [], LocalPredictiveWindow.loop_weights

    def spy(self, dtype):
        asked.append(dtype)
        return loop_weights(self, dtype)

    monkeypatch.setattr(LocalPredictiveWindow, "loop_weights", spy)
    x = torch.zeros(2, 3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert luong_loop.position_dtype(x) == torch.float32
        assert luong_loop.product_dtype(x) == torch.bfloat16
    assert luong_loop.position_dtype(x.double()) == torch.float64  # no autocast: as given
    model = build(attention_window="local-p", attention_score="general", precision="fp32")
    src, lengths, prev = batch(model, "cpu")
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # what --precision bf16 runs under
        model(src, lengths, prev)[0].sum().backward()
        monkeypatch.setattr(luong_loop, "POSITION_FP32_ON_CPU", False)
        model(src, lengths, prev)[0].sum().backward()
    assert asked == [torch.float32, torch.bfloat16]

    window = model.decoder.attention.window
    weights = loop_weights(window, torch.float32)
    query, scale = torch.randn(3, window.W_p.weight.size(1)), torch.full((3, 1), 9.0)  # B x H
    args = (query, weights.W_p.weight_t, weights.v_p.weight_t, scale, weights)
    plain = position_step(*args)[0]  # B x 1: p_t
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = position_step(*args)[0]
    assert under_autocast.dtype == torch.float32 and torch.equal(under_autocast, plain)

    # W_p in the loop's bf16 (CUDA's case, or POSITION_FP32_ON_CPU off), v_p fp32: h_t W_p in
    # bf16 as autocast would, the logit v_pᵀ tanh(·) in fp32, as the fused step computes it
    weights = loop_weights(window, torch.bfloat16)
    args = (query, weights.W_p.weight_t, weights.v_p.weight_t, scale, weights)
    plain = position_step(*args)[0]  # B x 1: p_t, no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = position_step(*args)[0]
    assert under_autocast.dtype == torch.float32 and torch.equal(under_autocast, plain)


def _fused(model, src, lengths, prev):
    features, _ = model.extract_features(src, lengths, prev)  # B x T x C
    layer = model.decoder.output_projection()
    target = torch.roll(prev, -1, dims=1).flatten()
    loss, _, _ = fused_output_loss(
        features.flatten(0, 1), layer.weight, layer.bias, target, 0.1, chunk=7
    )
    return loss


LOSS_CURVES = [
    pytest.param(dict(attention_window="local-p", attention_score="general"), _nll, id="local-p-general-feed"),
    pytest.param(dict(attention_window="global", attention_score="dot", input_feeding=False), _fused, id="global-dot-nofeed-fused-loss"),
    pytest.param(dict(arch="bahdanau_tiny"), _fused, id="rnnsearch-fused-loss"),
]  # fmt: skip


@pytest.mark.parametrize("options,loss_of", LOSS_CURVES)
def test_bf16_loss_curve_close_to_fp32(options, loss_of, device):
    """50 Adam updates from the same weights on the same batches: the two runs'
    losses stay within LOSS_TOL of each other at every update, and both learn."""
    models = pair(options, device)
    batches = [
        batch(models[0], device, lengths, 8) for lengths in ((9, 4, 7), (5, 8, 6), (3, 9, 9))
    ]
    curves = []
    for model in models:
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        curve = []
        for update in range(50):
            loss = loss_of(model, *batches[update % len(batches)])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            curve.append(loss.item())
        curves.append(torch.tensor(curve))
    fp32, bf16 = curves
    assert bf16[-3:].mean() < 0.7 * bf16[:3].mean()  # it learns
    relative = ((bf16 - fp32).abs() / fp32).max().item()
    assert relative <= LOSS_TOL, f"loss curves differ by {relative:.3f}"


def test_fused_loss_bf16_features_close_to_fp32(device):
    g = torch.Generator().manual_seed(0)
    features = torch.randn(40, 16, generator=g).to(device)
    weight = torch.randn(50, 16, generator=g).to(device).requires_grad_()
    bias = torch.randn(50, generator=g).to(device).requires_grad_()
    target = torch.randint(0, 50, (40,), generator=g).to(device)
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        x = features.to(dtype).requires_grad_()
        loss, _, _ = fused_output_loss(x, weight, bias, target, 0.1, chunk=16)
        grads = torch.autograd.grad(loss, (x, weight, bias))
        assert loss.dtype == torch.float32 and grads[0].dtype == dtype
        assert grads[1].dtype == torch.float32  # the fp32 weight gets an fp32 gradient
        results.append((loss, grads))
    (loss32, grads32), (loss16, grads16) = results
    assert abs(loss16.item() - loss32.item()) <= 0.01 * loss32.item()
    for g32, g16 in zip(grads32, grads16):
        assert (g16.float() - g32).norm() <= PARAM_GRAD_TOL * g32.norm()


@pytest.mark.parametrize("options", VARIANTS)
def test_bf16_incremental_decoding_close_to_full_forward(options, device):
    """Step by step with a cached state (the generator's path; no-feed models take
    the per-step loop, so the cell state stays fp32) against one full forward."""
    _, model = pair(options, device)
    src, lengths, prev = batch(model, device)
    with torch.no_grad():
        full, _ = model(src, lengths, prev)
        encoder_out = model.encoder(src, lengths)
        state, steps = {}, []
        for t in range(prev.size(1)):
            logits, _ = model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)
            steps.append(logits)
    stepped = torch.cat(steps, dim=1)
    assert close(stepped, full, LOGIT_TOL, full.float().abs().max().item())


class _Casts(TorchDispatchMode):
    """The shapes of the tensors cast (``_to_copy``) while it is on."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func == torch.ops.aten._to_copy.default:
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(
    "options", [VARIANTS[0], *[v for v in VARIANTS if v.id in ("rnnsearch", "rnnencdec")]]
)
def test_bf16_decoding_casts_the_output_layer_once_per_generation_call(options, device):
    """Each decoding step is an autocast region of its own, whose cache of cast parameters
    ends with it: the output layer's weight (V x O) is cast once per generation call
    (``CachedStateDecoder.output_linear``), not at every step, with the same logits."""
    _, model = pair(options, device)
    layer = model.decoder.output_projection()
    src, lengths, prev = batch(model, device)

    def decode():
        with torch.no_grad():
            encoder_out = model.encoder(src, lengths)
            state, steps = {}, []
            with _Casts() as casts:
                for t in range(prev.size(1)):
                    logits, _ = model.decoder(
                        prev[:, : t + 1], encoder_out, incremental_state=state
                    )
                    steps.append(logits)
        return torch.cat(steps, dim=1), casts.shapes.count(tuple(layer.weight.shape))

    kept, casts_kept = decode()
    model.decoder.output_linear = lambda layer, features, state=None: layer(features)
    every_step, casts_every_step = decode()
    assert casts_kept == 1 and casts_every_step == prev.size(1)
    assert kept.dtype == torch.bfloat16 and torch.equal(kept, every_step)


def test_unknown_precision_names_the_option_and_values():
    with pytest.raises(OptionError, match=r"--precision.*'fp16'.*bf16, fp32"):
        build("luong_tiny", precision="fp16")
    with pytest.raises(OptionError, match=r"--precision.*bf16, fp32"):
        build("bahdanau_tiny", precision="half")


def test_cpu_without_bf16_is_refused(monkeypatch):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for arch in ("luong_tiny", "bahdanau_tiny"):
        with pytest.raises(OptionError, match=r"--precision bf16 needs a CPU with native bf16"):
            build(arch, precision="bf16")
    build("luong_tiny", precision="fp32")  # fp32 is never refused


def test_fp32_is_the_default_and_runs_without_autocast():
    model = build("luong_tiny")
    assert model.encoder.compute_dtype is None and model.decoder.compute_dtype is None
    src, lengths, prev = batch(model, torch.device("cpu"))
    logits, _ = model(src, lengths, prev)
    assert logits.dtype == torch.float32


# -- checkpoints through fairseq's entry points (CPU) -----------------------------------
needs_cpu_bf16 = pytest.mark.skipif(
    not precision.cpu_has_native_bf16(), reason="this CPU has no native bf16"
)


@pytest.mark.slow
@needs_cpu_bf16
# each direction once, each model once (the override is the model's option, not the model's
# own code; the four combinations cost over a minute and a half of the suite)
@pytest.mark.parametrize(
    "arch,trained,decoded", [("luong_tiny", "bf16", "fp32"), ("bahdanau_tiny", "fp32", "bf16")]
)
def test_checkpoint_trained_in_one_precision_decodes_in_the_other(
    bible, tmp_path, arch, trained, decoded
):
    log = train(bible / "bin", tmp_path, "--precision", trained, arch=arch, updates=40)
    assert "done training" in log
    path = tmp_path / "checkpoint_last.pt"
    assert checkpoint_utils.load_checkpoint_to_cpu(str(path))["cfg"].model.precision == trained
    override = ("--model-overrides", f"{{'precision': '{decoded}'}}")
    models, _ = checkpoint_utils.load_model_ensemble(
        [str(path)], arg_overrides={"precision": decoded}
    )
    assert models[0].decoder.compute_dtype == precision.compute_dtype(decoded)

    as_trained, other = parse_generate(generate(bible / "bin", path)), parse_generate(
        generate(bible / "bin", path, *override)
    )
    assert len(as_trained) == len(other) == 29
    same = [i for i in as_trained if as_trained[i].hypothesis == other[i].hypothesis]
    assert len(same) >= 0.8 * len(as_trained), f"{len(same)} of {len(as_trained)} hypotheses agree"
    # 40 updates leave a tiny model saying much the same for every sentence, so equal text
    # says little: the same hypothesis must also score the same, to bf16's rounding (the
    # two precisions differed by at most 0.015 in their mean log-probability)
    for i in same:
        assert abs(as_trained[i].score - other[i].score) < 0.05, (i, as_trained[i], other[i])
    # and the override reached fairseq-generate: the other precision rounds differently
    assert any(as_trained[i].score != other[i].score for i in same)
    lines = (bible / "spm" / "test.es").read_text().splitlines()[:2]
    out = fairseq(
        "fairseq-interactive", bible / "bin", "--user-dir", USER_DIR, "--path", path,
        "--source-lang", "es", "--target-lang", "en", "--beam", "5", "--max-len-b", "12",
        *override, input="\n".join(lines) + "\n",
    )  # fmt: skip
    assert len(parse(out, "H")) == 2
