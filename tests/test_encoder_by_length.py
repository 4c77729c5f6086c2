"""The encoder's two ways through a batch of unequal lengths on a CPU (lstm_encoder.py):
one LSTM call per distinct length (``run_by_length``) and one call on a packed batch.

Both against the loop-based reference of the paper (tests/luong_reference.py), and
against each other, forward and backward: outputs zero on padding, final states after
each sentence's last token, and the gradients of the embeddings and the weights."""

import pytest
import torch
from conftest import build, random_batch, random_prev_output, spread_parameters
from luong_reference import Options, reference_batch

from luong_plugin.modules import lstm_encoder

LENGTHS = [12, 4, 7, 4, 12]  # three distinct lengths, two of them shared
TARGET_LEN = 6

# LENGTH_GROUPS: 0 and 2 leave this batch packed, 3 and more split it by length
PATHS = {"packed": 0, "packed-over-two-lengths": 2, "by-length": 3}


def _model(reverse: bool, layers: int = 2):
    model = build(
        "luong_tiny",
        encoder_layers=layers,
        decoder_layers=layers,
        attention_window="global",
        attention_score="general",
        input_feeding=True,
        reverse_source=reverse,
    )
    return spread_parameters(model)


@pytest.mark.parametrize("reverse", [False, True], ids=["forward", "reversed"])
@pytest.mark.parametrize("path", list(PATHS))
def test_each_path_gives_the_papers_model(path, reverse, monkeypatch):
    monkeypatch.setattr(lstm_encoder, "LENGTH_GROUPS", PATHS[path])
    model = _model(reverse).eval()
    dictionary = model.encoder.dictionary
    src_tokens, src_lengths = random_batch(dictionary, LENGTHS, left_pad=True)
    prev = random_prev_output(model.decoder.dictionary, len(LENGTHS), TARGET_LEN)
    opts = Options(window="global", score="general", input_feeding=True, reverse_source=reverse)
    refs = reference_batch(model, opts, src_tokens, prev, dictionary.pad())
    with torch.no_grad():
        logits, _ = model(src_tokens, src_lengths, prev)
    for b, ref in enumerate(refs):
        diff = (logits[b].double() - ref.logits.double()).abs().max()
        assert float(diff) <= 1e-5, (path, b, float(diff))


def _encode(model, src_tokens, src_lengths, groups, monkeypatch):
    """Outputs, final states and the gradients of a loss of all three, with LENGTH_GROUPS
    at ``groups``."""
    monkeypatch.setattr(lstm_encoder, "LENGTH_GROUPS", groups)
    model.zero_grad()
    out = model.encoder(src_tokens, src_lengths)
    g = torch.Generator().manual_seed(3)
    loss = sum((out[k] * torch.randn(out[k].shape, generator=g)).sum()
               for k in ("encoder_out", "final_hiddens", "final_cells"))  # fmt: skip
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.encoder.named_parameters() if p.grad is not None}
    return {k: out[k].detach() for k in ("encoder_out", "final_hiddens", "final_cells")}, grads


@pytest.mark.parametrize("layers", [1, 3])
@pytest.mark.parametrize("lengths", [[5, 5, 5], [6, 3, 6, 3], [9, 2, 5, 7, 2]], ids=str)
def test_by_length_equals_packed_forward_and_backward(lengths, layers, monkeypatch):
    model = _model(reverse=True, layers=layers).eval()  # no dropout: both paths see the same inputs
    src_tokens, src_lengths = random_batch(model.encoder.dictionary, lengths, left_pad=True)
    packed = _encode(model, src_tokens, src_lengths, 0, monkeypatch)
    by_length = _encode(model, src_tokens, src_lengths, len(set(lengths)), monkeypatch)
    for (name, a), b in zip(packed[0].items(), by_length[0].values()):
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-6), name
    out = by_length[0]["encoder_out"]  # B x S x E, true order
    for row, n in enumerate(lengths):
        assert out[row, n:].abs().sum() == 0, "padding's outputs are zero"
    assert packed[1].keys() == by_length[1].keys() and packed[1]
    for name in packed[1]:
        assert torch.allclose(packed[1][name], by_length[1][name], atol=1e-5), name


def test_a_batch_of_more_lengths_than_groups_stays_packed(monkeypatch):
    calls = []
    monkeypatch.setattr(lstm_encoder, "run_by_length", lambda *a: calls.append(a))
    model = _model(reverse=False).eval()
    src_tokens, src_lengths = random_batch(model.encoder.dictionary, [9, 2, 5, 7, 3])
    monkeypatch.setattr(lstm_encoder, "LENGTH_GROUPS", 4)
    model.encoder(src_tokens, src_lengths)  # five lengths: packed
    assert calls == []
    monkeypatch.setattr(lstm_encoder, "LENGTH_GROUPS", 5)
    with pytest.raises(TypeError):  # the stand-in returns None: the by-length path was taken
        model.encoder(src_tokens, src_lengths)
    assert len(calls) == 1
