"""--dropout-placement against the loop reference (tests/luong_reference.py).

A dropout mask cannot be matched by an independent reference, so each dropout
module is replaced by a fixed scale k: the model must then apply k exactly at
the places its placement names (Luong's code, Zaremba et al., fairseq's lstm),
which the reference writes out on its own. The model is in eval mode, so the
dropout between stacked layers (not part of the placement) is off on both sides.
"""

import pytest
import torch
import torch.nn as nn
from conftest import build, random_batch, random_prev_output, spread_parameters
from luong_reference import Options, reference_batch

SCALE = 0.5
LENGTHS = [9, 4, 6]


class Scale(nn.Module):
    def __init__(self, k: float):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k


def _scaled_model(window, placement, feed):
    overrides = dict(attention_window=window, input_feeding=feed, dropout_placement=placement)
    if window == "none":
        overrides["decoder_out_embed_dim"] = 24
    else:
        overrides["attention_score"] = "general"
    model = spread_parameters(build("luong_tiny", **overrides))
    model.encoder.dropout = Scale(SCALE)
    model.encoder.output_dropout = Scale(SCALE if placement == "fairseq" else 1.0)
    model.decoder.dropout = Scale(SCALE)
    return model


@pytest.mark.parametrize("feed", [True, False], ids=["feed", "nofeed"])
@pytest.mark.parametrize("window", ["global", "local-p", "none"])
@pytest.mark.parametrize("placement", ["luong", "zaremba", "fairseq"])
def test_dropout_placement_matches_reference(placement, window, feed):
    if window == "none" and feed:
        pytest.skip("the Base model has no h~_t to feed")
    model = _scaled_model(window, placement, feed)
    opts = Options(
        window=window, score="general", input_feeding=feed, reverse_source=True,
        dropout_placement=placement, dropout_scale=SCALE,
    )  # fmt: skip
    src, lengths = random_batch(model.encoder.dictionary, LENGTHS)
    prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), 7)
    with torch.no_grad():
        logits, _ = model(src, lengths, prev)
    refs = reference_batch(model, opts, src, prev, model.encoder.dictionary.pad())
    for b, ref in enumerate(refs):
        diff = float((logits[b].double() - ref.logits).abs().max())
        assert diff < 1e-5, f"sentence {b}: max |diff| {diff:.3g}"


@pytest.mark.parametrize("placement", ["luong", "zaremba", "fairseq"])
def test_placements_differ(placement):
    """The reference itself tells the three placements apart (the test above can fail)."""
    model = _scaled_model("global", "luong", True)
    src, lengths = random_batch(model.encoder.dictionary, LENGTHS)
    prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), 7)
    logits = {}
    for other in ["luong", "zaremba", "fairseq"]:
        opts = Options(
            window="global", score="general", input_feeding=True, reverse_source=True,
            dropout_placement=other, dropout_scale=SCALE,
        )  # fmt: skip
        logits[other] = reference_batch(model, opts, src, prev, 1)[0].logits
    for other, value in logits.items():
        if other != placement:
            assert float((value - logits[placement]).abs().max()) > 1e-3, (placement, other)


def test_dropout_placement_trains_the_same_function_in_eval_mode():
    """Placement changes training only: in eval mode the three decode alike."""
    outputs = []
    for placement in ["luong", "zaremba", "fairseq"]:
        torch.manual_seed(0)
        model = build("luong_tiny", attention_window="global", dropout_placement=placement)
        src, lengths = random_batch(model.encoder.dictionary, LENGTHS)
        prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), 7)
        with torch.no_grad():
            outputs.append(model(src, lengths, prev)[0])
    assert torch.equal(outputs[0], outputs[1]) and torch.equal(outputs[0], outputs[2])


def test_checkpoint_from_before_the_options_decodes_as_trained():
    """A checkpoint whose config predates --attend-source-eos keeps the conventions it
    was trained with (</s> read first and attended, centre floor(p_t + 0.5))."""
    from omegaconf import OmegaConf

    legacy = dict(
        attention_window="local-p", reverse_source=True, reverse_source_eos=True,
        attend_source_eos=True, dropout_placement="zaremba",
    )  # fmt: skip
    trained = spread_parameters(build("luong_tiny", **legacy))
    trained.decoder.attention.window.round_centre = True
    src, lengths = random_batch(trained.encoder.dictionary, LENGTHS)
    prev = random_prev_output(trained.decoder.dictionary, len(LENGTHS), 7)
    with torch.no_grad():
        expected = trained(src, lengths, prev)[0]

    old_cfg = OmegaConf.create({"_name": "luong_tiny", "attention_window": "local-p"})
    loaded = build("luong_tiny", attention_window="local-p")  # today's defaults
    loaded.load_state_dict(trained.state_dict(), model_cfg=old_cfg)
    with torch.no_grad():
        assert torch.equal(loaded(src, lengths, prev)[0], expected)

    current = build("luong_tiny", attention_window="local-p")
    current.load_state_dict(
        trained.state_dict(),
        model_cfg=OmegaConf.create(
            {"_name": "luong_tiny", "attention_window": "local-p", "attend_source_eos": False}
        ),
    )
    with torch.no_grad():
        assert not torch.allclose(current(src, lengths, prev)[0], expected)
