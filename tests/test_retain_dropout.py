"""--retain-dropout / --retain-dropout-modules reach every dropout of every plugin model.

fairseq's generator calls ``make_generation_fast_(retain_dropout=True,
retain_dropout_modules=[...])``; the end-to-end check through fairseq-generate
is in test_compatibility.py."""

import pytest
import torch
import torch.nn as nn
from conftest import build, random_batch, random_prev_output
from fairseq.modules import FairseqDropout

from luong_plugin.modules.dropout import DropoutLSTM

MODELS = {
    "luong_local_p": dict(arch="luong_tiny"),
    "luong_global": dict(arch="luong_tiny", attention_window="global"),
    "luong_no_feed": dict(arch="luong_tiny", attention_window="global", input_feeding=False),
    "luong_base": dict(
        arch="luong_tiny", attention_window="none", input_feeding=False, decoder_out_embed_dim=24
    ),
    "rnnsearch": dict(arch="bahdanau_tiny", dropout=0.3),
    "rnnencdec": dict(arch="bahdanau_tiny", attention="none", dropout=0.3),
}


def logits(model, seed):
    src, lengths = random_batch(model.encoder.dictionary, [7, 5, 3])
    prev = random_prev_output(model.decoder.dictionary, 3, 6)
    torch.manual_seed(seed)
    with torch.no_grad():
        return model(src, lengths, prev)[0]  # B x T x V


@pytest.mark.parametrize("name", MODELS)
def test_every_dropout_is_a_named_fairseq_dropout(name):
    model = build(**MODELS[name])
    dropouts = [m for m in model.modules() if isinstance(m, (nn.Dropout, FairseqDropout))]
    assert dropouts and all(isinstance(m, FairseqDropout) and m.module_name for m in dropouts)
    for module in model.modules():  # nn.LSTM's own between-layer dropout is retainable too
        if isinstance(module, nn.LSTM) and module.dropout > 0:
            assert isinstance(module, DropoutLSTM)


@pytest.mark.parametrize("name", MODELS)
def test_retain_dropout_makes_decoding_stochastic(name):
    model = build(**MODELS[name])
    assert torch.equal(logits(model, 1), logits(model, 2))  # eval: dropout off
    model.make_generation_fast_(retain_dropout=True)
    first, second = logits(model, 1), logits(model, 2)
    assert not torch.allclose(first, second)
    assert torch.equal(first, logits(model, 1))  # the same seed, the same masks


@pytest.mark.parametrize("arch", ["luong_tiny", "bahdanau_tiny"])
def test_retain_dropout_modules_selects_by_class_name(arch):
    overrides = {"dropout": 0.3} if arch == "bahdanau_tiny" else {}
    model = build(arch, **overrides)
    decoder_name = type(model.decoder).__name__
    model.make_generation_fast_(retain_dropout=True, retain_dropout_modules=[decoder_name])
    active = {
        m.module_name
        for m in model.modules()
        if isinstance(m, FairseqDropout) and m.apply_during_inference
    }
    assert active == {decoder_name}
    src, lengths = random_batch(model.encoder.dictionary, [7, 5])
    with torch.no_grad():  # the encoder's dropout stays off
        assert torch.equal(
            model.encoder(src, lengths)["encoder_out"], model.encoder(src, lengths)["encoder_out"]
        )
    assert not torch.allclose(logits(model, 1), logits(model, 2))


def test_between_layer_dropout_of_the_fused_lstm_is_retained():
    """Only the encoder's dropout on: its 2-layer nn.LSTM drops out between layers
    at decoding time too (its embedding dropout is off here: p = 0)."""
    model = build("luong_tiny", dropout=0.3)
    encoder = model.encoder
    encoder.dropout.p = 0.0
    model.make_generation_fast_(retain_dropout=True, retain_dropout_modules=["LuongEncoder"])
    assert not encoder.training and encoder.lstm.between_layers.apply_during_inference
    src, lengths = random_batch(encoder.dictionary, [7, 5])
    with torch.no_grad():
        torch.manual_seed(1)
        first = encoder(src, lengths)["encoder_out"]
        torch.manual_seed(2)
        second = encoder(src, lengths)["encoder_out"]
    assert not torch.allclose(first, second)
    assert not encoder.lstm.training  # back in eval mode afterwards
