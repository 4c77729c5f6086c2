"""bf16 mixed precision for the plugin's models (``--precision bf16``).

The parameters, their gradients and the optimizer's state stay fp32 (fairseq's
trainer and optimizer are untouched). The encoder's and the decoder's forward
passes run under ``torch.autocast`` in bf16 on the device of their parameters,
CPU or CUDA, so the products (the input projections, the recurrent products,
the scores of whole sequences, W_c, the output layer) run in bf16 with fp32
accumulation, while these stay fp32:

- softmax and log-softmax (attention.py, fairseq's ``get_normalized_probs``,
  the fused loss);
- the LSTM cell state c_t and h_t of the input-feeding loop and the GRU state
  s_i / h_i: each product is cast to fp32 before the gates (``lstm_step``, on
  CUDA ``fused_lstm_cell``, outside autocast; ``PaperGRU.step``). The LSTMs run
  as ``nn.LSTM`` calls (Luong's encoder and the decoder without input feeding)
  are autocast whole, and torch picks their kernel by input: on a CPU oneDNN's
  bf16 LSTM, with a bf16 state and bf16 outputs, for the no-feed decoder and for
  the encoder's unpadded rows (a batch of up to ``lstm_encoder.LENGTH_GROUPS``
  distinct lengths, one call per length), its own LSTM with bf16 products and an
  fp32 state for a packed batch of more lengths (tests/test_bf16_parts.py);
- local-p's p_t (eq. 9) and local-m's centre, which index positions up to S:
  bf16's 8-bit mantissa would move them by several positions beyond 256; eq.
  (9)'s logit v_pᵀ tanh(·) in the training loop on every device, and on a CPU
  its h_t W_p too (``luong_loop.position_dtype``);
- the attention of one decoding step (T = 1 in the per-step loop), whose
  B x 1 x S products are too small for bf16 to pay (docs/SPEED.md, "Mixed
  precision"), so it runs in fp32 when the encoder's
  outputs are fp32 (``step_attention_precision``); in training, a step's fused
  attention (attention_step.py) runs in fp32 whatever the encoder's outputs.

The recurrent weights of the per-step loop are cast to bf16 once per call, not
at every step (``loop_weights``): autocast caches the casts of parameters, not
of the concatenated, transposed weights the loop multiplies.

fairseq's ``--fp16`` and ``--memory-efficient-fp16`` (and ``--bf16`` where
torch_xla exists) make the model itself half; ``run_dtype`` then runs it the same
way, under autocast in its weights' dtype, with the states above in fp32.

The switch is a model option, saved in the checkpoint; decoding can override it
(``--model-overrides "{'precision': 'fp32'}"``). A CPU without native bf16
instructions (AVX512-BF16 or AMX) is refused: there bf16 products are emulated
and slower than fp32.
"""

import contextlib
import functools
from typing import Optional

import torch
from torch import Tensor

from .options import OptionError, lookup

PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}


def compute_dtype(precision) -> Optional[torch.dtype]:
    """The autocast dtype of a ``--precision`` value (None: fp32, no autocast)."""
    return lookup("--precision", PRECISIONS, precision)


def cpu_has_native_bf16() -> bool:
    """AVX512-BF16 or AMX-BF16: oneDNN runs bf16 products in hardware."""
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def require_support(dtype: Optional[torch.dtype], device: torch.device) -> None:
    if dtype is None:
        return
    if device.type == "cpu" and not cpu_has_native_bf16():
        raise OptionError(
            "--precision bf16 needs a CPU with native bf16 instructions (AVX512-BF16 or "
            f"AMX); this one has {torch.backends.cpu.get_cpu_capability()} only, where torch "
            "emulates bf16 products more slowly than fp32: use --precision fp32"
        )
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise OptionError(
            "--precision bf16 needs a GPU with bf16 support (compute capability 8.0 or "
            "newer); use --precision fp32"
        )


def default_precision() -> str:
    """The ``--precision`` make demo and recipes/own_text train with on this machine:
    bf16 on a CPU with native bf16 instructions, where ``make bench`` measures it faster
    than fp32 (docs/BENCHMARKS.md); fp32 on a GPU, where bench/gpu.py measured none of
    bf16, --fp16 and --amp faster than fp32 on the plain path (docs/BENCHMARKS.md; with
    --cuda-graphs they were, at the papers' shape, which the WMT recipes use; the demo's size
    was not measured on a GPU); fp32 elsewhere."""
    if torch.cuda.is_available():
        return "fp32"
    return "bf16" if cpu_has_native_bf16() else "fp32"


@functools.lru_cache(maxsize=None)
def _checked(dtype: Optional[torch.dtype], device_type: str) -> bool:
    require_support(dtype, torch.device(device_type))
    return True


def autocast(dtype: Optional[torch.dtype], device: torch.device):
    """``torch.autocast`` to ``dtype`` on ``device``, or nothing for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    _checked(dtype, device.type)
    return torch.autocast(device.type, dtype=dtype)


HALF_DTYPES = (torch.float16, torch.bfloat16)
FAIRSEQ_FLAG = {torch.float16: "--fp16", torch.bfloat16: "--bf16"}


def run_dtype(module) -> Optional[torch.dtype]:
    """The dtype the products of ``module`` (an encoder or a decoder) run in, or None
    for fp32: its ``compute_dtype`` (``--precision``), or, when fairseq made the
    model half itself (``--fp16``, ``--memory-efficient-fp16``, ``--bf16``: half
    weights, half inputs), the dtype of its weights. Both run the same way: the
    products under autocast in the half dtype, the recurrent states, softmaxes and
    positions in fp32, so no fp32 state ever meets a half weight in a product."""
    weight_dtype = module.embed_tokens.weight.dtype
    if weight_dtype not in HALF_DTYPES:
        return module.compute_dtype
    if module.training and module.compute_dtype not in (None, weight_dtype):
        # in training both were asked for: say so; in decoding fairseq-generate's flag,
        # given last, wins over the precision a checkpoint was trained in
        raise OptionError(
            f"{FAIRSEQ_FLAG[weight_dtype]} made the model's weights {weight_dtype} but the "
            f"model was built with --precision bf16 ({module.compute_dtype}): choose one, "
            f"--precision fp32 with {FAIRSEQ_FLAG[weight_dtype]}, or --precision bf16 "
            "without it"
        )
    return weight_dtype


def mixed_precision(method):
    """Run a module's method under autocast to its ``run_dtype`` (fp32: no autocast),
    on the device of its parameters."""

    @functools.wraps(method)
    def wrapped(self, *args, **kwargs):
        dtype = run_dtype(self)
        if dtype is None:
            return method(self, *args, **kwargs)
        device = self.embed_tokens.weight.device
        if self.embed_tokens.weight.dtype == dtype:  # half weights: no choice to check
            context = torch.autocast(device.type, dtype=dtype)
        else:
            context = autocast(dtype, device)
        with context:
            return method(self, *args, **kwargs)

    return wrapped


def set_precision(model, precision) -> None:
    """Set the compute dtype of a model's encoder and decoder from ``--precision``."""
    dtype = compute_dtype(precision)
    if not torch.cuda.is_available():  # a CPU-only machine: refuse before training starts
        require_support(dtype, torch.device("cpu"))
    for part in (model.encoder, model.decoder):
        part.compute_dtype = dtype


def autocast_on(device: str) -> bool:
    """Whether autocast is on for a device type (the meta device has none)."""
    return device in ("cpu", "cuda") and torch.is_autocast_enabled(device)


def product_dtype(like: Tensor) -> torch.dtype:
    """The dtype autocast gives products on ``like``'s device: bf16 inside the
    model's autocast region, ``like.dtype`` outside it."""
    device = like.device.type
    if autocast_on(device):
        return torch.get_autocast_dtype(device)
    return like.dtype


def at_least_fp32(dtype: torch.dtype) -> torch.dtype:
    """fp16/bf16 -> fp32; fp32 and fp64 stay."""
    return torch.promote_types(dtype, torch.float32)


def full_precision(device: torch.device):
    """A region without autocast (fp32 products), inside the model's autocast."""
    return torch.autocast(device.type, enabled=False)


def outside_autocast(device: torch.device):
    """``full_precision`` where autocast is on, else nothing: for work inside the decoder's
    per-step loop, which then enters and leaves no context at every step."""
    return full_precision(device) if autocast_on(device.type) else contextlib.nullcontext()


def step_attention_precision(query: Tensor, values: Tensor, weight: Optional[Tensor] = None):
    """fp32 for the attention of one step (query B x 1 x H) under bf16 autocast,
    when the query and the values are fp32 already: its B x 1 x S products run
    slower in bf16 than in fp32. Otherwise (whole sequences, fp32, or a model whose
    weights, such as ``weight``, fairseq made half) nothing."""
    device = query.device.type
    if not (autocast_on(device) and query.dim() == 3 and query.size(1) == 1):
        return contextlib.nullcontext()
    if weight is not None and weight.dtype in HALF_DTYPES:
        return contextlib.nullcontext()  # half weights: no fp32 product can take them
    if query.dtype != values.dtype or query.dtype == torch.get_autocast_dtype(device):
        return contextlib.nullcontext()
    return full_precision(query.device)
