"""fairseq's own precision flags on every model (luong_plugin/modules/precision.py,
``run_dtype``).

``--fp16`` and ``--memory-efficient-fp16`` make the whole model half
(``model.half()``: half weights, half inputs, half gradients), and so does
``--bf16`` in fairseq-train (``model.bfloat16()``, where torch_xla exists);
``--amp`` keeps fp32 weights and runs the forward under fp16 autocast. These
tests do exactly that to each model, on the CPU so that CI catches a regression
without a GPU, and on a GPU where one is present: the half model against its
fp32 twin with the same (rounded) weights, its gradients, incremental decoding
against the full forward, and fairseq-train / -generate / -interactive with the
flags that run on a CPU (``--fp16`` itself needs CUDA in fairseq's optimizer,
which keeps an fp32 copy of the weights; the model is treated as by
``--memory-efficient-fp16``).

Tolerances as for ``--precision bf16`` (test_precision.py): fp16 keeps 11
significant bits, bf16 8.
"""

import copy

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
    run_tool,
    spread_parameters,
    steps_to_compare,
    train_args,
)

from luong_plugin.fairseq_fixes import BF16_REFUSAL
from luong_plugin.modules import precision
from luong_plugin.modules.options import OptionError

LOGIT_TOL = 0.02  # x max |logit|
ATTN_TOL = 0.02
P_T_TOL = 0.01  # x S_b
GRAD_TOL = 0.03  # relative L2 norm, all parameters together

HALVES = [pytest.param(torch.float16, id="fp16"), pytest.param(torch.bfloat16, id="bf16")]


def _devices():
    cuda = pytest.param(
        "cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
    )
    return ["cpu", cuda]


@pytest.fixture(params=_devices())
def device(request):
    return torch.device(request.param)


def twins(options, dtype, device, spread=True):
    """A model made half as fairseq makes it (``model.to(dtype)``) and its fp32 twin
    holding the same, rounded weights."""
    options = dict(options)
    arch = options.pop("arch", "luong_tiny")
    model = build(arch, dropout=0.0, **options)
    if spread:
        spread_parameters(model)
    half = model.to(device=device, dtype=dtype)
    return copy.deepcopy(half).float(), half


def _nll(model, src, lengths, prev):
    logits, _ = model(src, lengths, prev)
    target = torch.roll(prev, -1, dims=1)
    return F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), reduction="sum")


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("options", VARIANTS)
def test_half_model_forward_close_to_fp32(options, dtype, device):
    fp32, half = twins(options, dtype, device)
    src, lengths, prev = batch(fp32, device)
    with torch.no_grad():
        logits32, extra32 = fp32(src, lengths, prev)
        logits16, extra16 = half(src, lengths, prev)
    assert logits16.dtype == dtype
    steps = steps_to_compare(logits32, extra32, extra16, lengths, P_T_TOL)  # B x T
    scale = logits32.abs().max().item()
    diff = (logits16.float() - logits32)[steps]
    assert diff.abs().max().item() <= LOGIT_TOL * scale, diff.abs().max()
    assert not torch.equal(logits16.float(), logits32)  # the products did run in half
    attn32, attn16 = extra32["attn"][0], extra16["attn"][0]
    assert (attn32 is None) == (attn16 is None)
    if attn32 is not None:
        gap = (attn16.float() - attn32)[steps]
        assert gap.abs().max().item() <= ATTN_TOL, gap.abs().max()


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("options", VARIANTS)
def test_half_model_gradients_close_to_fp32(options, dtype, device):
    """From the model's own initialisation: every parameter gets a finite gradient in
    the weights' dtype (what fairseq's fp16 optimizers unscale), and the whole
    gradient is within GRAD_TOL of the fp32 twin's."""
    fp32, half = twins(options, dtype, device, spread=False)
    src, lengths, prev = batch(fp32, device)
    for model in (fp32, half):
        model.train()
        _nll(model, src, lengths, prev).backward()
    for name, p in half.named_parameters():
        assert p.grad is not None and p.grad.dtype == dtype, name
        assert bool(torch.isfinite(p.grad).all()), name
    whole32 = torch.cat([p.grad.flatten() for p in fp32.parameters()])
    whole16 = torch.cat([p.grad.float().flatten() for p in half.parameters()])
    error = ((whole16 - whole32).norm() / whole32.norm()).item()
    assert 0 < error <= GRAD_TOL, f"relative gradient error {error:.4f}"


@pytest.mark.parametrize("dtype", HALVES)
@pytest.mark.parametrize("options", VARIANTS)
def test_half_incremental_decoding_close_to_full_forward(options, dtype, device):
    """fairseq-generate --fp16's path: step by step with a cached state."""
    _, model = twins(options, dtype, device)
    src, lengths, prev = batch(model, device)
    with torch.no_grad():
        full, _ = model(src, lengths, prev)
        encoder_out = model.encoder(src, lengths)
        state, steps = {}, []
        for t in range(prev.size(1)):
            logits, _ = model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)
            steps.append(logits)
    stepped = torch.cat(steps, dim=1)
    assert stepped.dtype == dtype
    assert close(stepped, full, LOGIT_TOL, full.float().abs().max().item())


@pytest.mark.parametrize("options", VARIANTS)
def test_amp_autocast_trains_close_to_fp32(options, device):
    """fairseq's --amp: fp32 weights, the forward under autocast, fp32 gradients. fairseq
    autocasts to fp16 on CUDA only (torch.cuda.amp); on the CPU torch's fp16 autocast of
    nn.LSTM stops in oneDNN on CPUs without fp16 instructions, so the CPU runs the same
    path under its own autocast dtype, bf16."""
    amp_dtype = torch.float16 if device.type == "cuda" else torch.bfloat16
    if device.type == "cpu" and not precision.cpu_has_native_bf16():
        pytest.skip("this CPU has no native bf16")
    options = dict(options)
    arch = options.pop("arch", "luong_tiny")
    model = build(arch, dropout=0.0, **options).to(device).train()
    src, lengths, prev = batch(model, device)
    grads = []
    for amp in (False, True):
        model.zero_grad()
        with torch.autocast(device.type, dtype=amp_dtype, enabled=amp):
            loss = _nll(model, src, lengths, prev)
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    error = ((grads[1] - grads[0]).norm() / grads[0].norm()).item()
    assert 0 < error <= GRAD_TOL, f"relative gradient error {error:.4f}"


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="this CPU has no native bf16")
@pytest.mark.parametrize("arch", ["luong_tiny", "bahdanau_tiny"])
def test_precision_bf16_and_half_weights_refused_in_training(arch):
    model = build(arch, precision="bf16").half().train()
    src, lengths, prev = batch(model, torch.device("cpu"))
    message = r"--fp16 made the model's weights torch.float16.*--precision bf16.*choose one"
    with pytest.raises(OptionError, match=message):
        model(src, lengths, prev)


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="this CPU has no native bf16")
@pytest.mark.parametrize("arch", ["luong_tiny", "bahdanau_tiny"])
def test_a_bf16_checkpoint_decodes_with_fp16(arch):
    """fairseq-generate --fp16 on a model trained with --precision bf16: the half
    weights, fairseq's flag given last, decide; the logits are the fp16 model's."""
    trained = build(arch, precision="bf16")
    plain = build(arch)
    plain.load_state_dict(trained.state_dict())
    src, lengths, prev = batch(trained, torch.device("cpu"))
    with torch.no_grad():
        logits, _ = trained.half()(src, lengths, prev)
        expected, _ = plain.half()(src, lengths, prev)
    assert logits.dtype == torch.float16
    torch.testing.assert_close(logits, expected)


# -- through fairseq's entry points ------------------------------------------------------
E2E = {  # the CLI's plumbing; every model's half forward and backward are tested above
    "local-p": ("--arch", "luong_tiny", "--attention-window", "local-p",
                "--criterion", "fused_label_smoothed_cross_entropy"),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("model", list(E2E))
def test_memory_efficient_fp16_trains_and_fp16_decodes(bible, tmp_path, model):
    """fairseq-train --memory-efficient-fp16 (the model half, as --fp16 makes it), then
    fairseq-generate and fairseq-interactive with --fp16, on the CPU."""
    args = train_args(bible / "bin", tmp_path, *E2E[model], schedule=("--max-update", 12))
    log = fairseq("fairseq-train", *args, "--cpu", "--memory-efficient-fp16")
    assert "done training" in log and "loss_scale" in log
    path = tmp_path / "checkpoint_last.pt"
    out = generate(bible / "bin", path, "--fp16", "--cpu")
    assert len(parse(out, "H")) == 29
    lines = (bible / "spm" / "test.es").read_text().splitlines()[:2]
    out = fairseq(
        "fairseq-interactive", bible / "bin", "--user-dir", USER_DIR, "--path", path,
        "--source-lang", "es", "--target-lang", "en", "--beam", "5", "--max-len-b", "12",
        "--fp16", "--cpu", input="\n".join(lines) + "\n",
    )  # fmt: skip
    assert len(parse(out, "H")) == 2


@pytest.mark.slow
def test_fairseq_bf16_without_torch_xla_is_refused_clearly(bible, tmp_path):
    args = train_args(bible / "bin", tmp_path, "--arch", "luong_tiny", schedule=("--max-update", 2))
    status, _, err = run_tool("fairseq-train", *args, "--bf16")
    assert status != 0
    assert BF16_REFUSAL in err
    assert "Traceback" not in err
