"""experiments/bf16_parts.py: each variant keeps the products it names, and only
those, in fp32 under ``--precision bf16``, and its section of docs/COMPARE.md.

Every matrix product of a forward pass is logged below autocast (a dispatch mode sees
the products as they run, after autocast's casts) and told apart by its shapes, which
``luong_tiny`` with a 12-wide decoder embedding makes distinct (H = E = 24, O = 20)."""

import json

import pytest
import torch
from conftest import build, random_batch, random_prev_output
from torch.utils._python_dispatch import TorchDispatchMode

from experiments import bf16_parts
from luong_plugin.modules import precision

aten = torch.ops.aten
H, O, C = 24, 20, 12  # decoder hidden, h̃, decoder embedding
V = 27  # target vocabulary of conftest.build's 20-symbol dictionaries


class Products(TorchDispatchMode):
    """(part, dtype of the product's inputs) of every mm / addmm / bmm that runs."""

    # (inner dim, output dim) of each part's 2-D product
    PARTS = {
        (C, 4 * H): "gates_x",
        (O + H, 4 * H): "gates",
        (2 * H, O): "combine",
        (O, V): "output",
    }

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (aten.mm.default, aten.addmm.default):
            a, b = args[-2:]
            part = self.PARTS.get((a.shape[-1], b.shape[-1]))
            if part:
                self.seen.append((part, a.dtype))
        elif func == aten.bmm.default and args[0].shape[1] == 1:  # one step's B x 1 x S
            self.seen.append(("attention", args[0].dtype))
        return func(*args, **(kwargs or {}))


def product_dtypes(variant=None, monkeypatch=None, lengths=(7, 5, 4)):
    """{part: dtypes of its products' inputs} in one training forward of a tiny global
    model in bf16; as the plugin runs it, or as ``variant`` of bf16_parts.py."""
    if variant is not None:
        bf16_parts.keep_fp32(bf16_parts.VARIANTS[variant], patch=monkeypatch.setattr,
                             told=lambda part: None)  # fmt: skip
    model = build("luong_tiny", decoder_embed_dim=C, decoder_layers=1, encoder_layers=1,
                  attention_window="global", attention_score="general", input_feeding=True,
                  precision="bf16")  # fmt: skip
    src, lengths = random_batch(model.encoder.dictionary, list(lengths))
    prev = random_prev_output(model.decoder.dictionary, len(lengths), 6)
    with Products() as log:
        model.train()(src, lengths, prev)
    dtypes = {}
    for part, dtype in log.seen:
        dtypes.setdefault(part, set()).add(dtype)
    return dtypes


# On a CPU the encoder runs a batch of a few lengths as one oneDNN bf16 LSTM call per length,
# whose outputs are bf16, and a packed batch of more lengths (lstm_encoder.LENGTH_GROUPS)
# through torch's own LSTM, with fp32 outputs: the encoder's values, and with them a step's
# attention (precision.py), are bf16 or fp32 by batch. Each kind runs.
BATCHES = [
    pytest.param((7, 5, 4), id="lengths-differ"),
    pytest.param((6, 6, 6), id="lengths-equal"),
    pytest.param((8, 7, 6, 5, 4), id="lengths-packed"),
]
PRODUCTS = ("gates_x", "gates", "combine", "output")


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="needs a CPU with native bf16")
@pytest.mark.parametrize("lengths", BATCHES)
@pytest.mark.parametrize("variant", [v for v in bf16_parts.VARIANTS if v != "fp32"])
def test_a_variant_keeps_its_parts_and_no_other_in_fp32(variant, lengths, monkeypatch):
    """Each part's products run in fp32 where the variant keeps it, else in bf16."""
    parts = bf16_parts.VARIANTS[variant]
    if "decoder" in parts:
        parts = PRODUCTS
    dtypes = product_dtypes(variant, monkeypatch, lengths)
    assert set(dtypes) == {*PRODUCTS, "attention"}
    for part in PRODUCTS:
        assert dtypes[part] == {torch.float32 if part in parts else torch.bfloat16}, part


@pytest.mark.skipif(not precision.cpu_has_native_bf16(), reason="needs a CPU with native bf16")
@pytest.mark.parametrize("lengths", BATCHES)
def test_the_plugin_runs_every_decoder_product_in_bf16(lengths):
    """--precision bf16 as shipped, the ``bf16`` variant's baseline: each of the four
    products runs in bf16 (a step's attention follows the encoder's outputs)."""
    dtypes = product_dtypes(lengths=lengths)
    assert {part: dtypes[part] for part in PRODUCTS} == {p: {torch.bfloat16} for p in PRODUCTS}


def test_section_gives_both_seeds_of_each_variant_run(tmp_path, monkeypatch):
    monkeypatch.setattr(bf16_parts, "OUT_DIR", str(tmp_path))
    assert bf16_parts.table_lines() == []
    for variant, seed, ppl in (("loop", 1, 67.11), ("bf16", 2, 56.12), ("bf16", 1, 69.9)):
        r = {"variant": variant, "seed": seed, "updates": 500, "commit": "abc",
             "valid_ppl": {"250": 140.0, "500": ppl}}  # fmt: skip
        (tmp_path / f"{variant}.seed{seed}.json").write_text(json.dumps(r))
    rows = [line for line in bf16_parts.table_lines() if line.startswith("| `")]
    assert rows == [
        "| `bf16` | nothing | 140.00 (140.00 / 140.00) | 63.01 (69.90 / 56.12) |",
        "| `loop` | `gates_x`, `gates`, `combine` | 140.00 (seed 1) | 67.11 (seed 1) |",
    ]
