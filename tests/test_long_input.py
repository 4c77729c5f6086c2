"""Long sources: a 1,000-token source decodes through fairseq's SequenceGenerator
with every window, and the memory a decode holds grows linearly with the
source length S, not with S².

Memory is the peak of live tensor storage during ``generate`` (every tensor an
operator returns, counted until it is freed), measured in this process and
independent of the allocator and of other processes on the machine.

Shape legend: B batch, T target len, S source len, H hidden size, K beam.
"""

import weakref

import pytest
import torch
from conftest import build, random_batch
from fairseq.sequence_generator import SequenceGenerator
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# 2 x 256 cells: the per-token state dominates the fixed costs
WIDER = dict(
    encoder_embed_dim=128,
    decoder_embed_dim=128,
    encoder_hidden_size=256,
    decoder_hidden_size=256,
    decoder_out_embed_dim=256,
)


class PeakTensorMemory(TorchDispatchMode):
    """Peak bytes of tensor storage alive at once, over the operators run inside.
    A storage counts from the first operator that returns it until the last
    tensor viewing it is freed."""

    def __init__(self):
        super().__init__()
        self.holders, self.nbytes, self.live, self.peak = {}, {}, 0, 0

    def _release(self, ptr):
        self.holders[ptr] -= 1
        if self.holders[ptr] == 0:
            del self.holders[ptr]
            self.live -= self.nbytes.pop(ptr)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr == 0:  # empty
                continue
            if ptr not in self.holders:
                self.holders[ptr] = 0
                self.nbytes[ptr] = storage.nbytes()
                self.live += storage.nbytes()
                self.peak = max(self.peak, self.live)
            self.holders[ptr] += 1
            weakref.finalize(tensor, self._release, ptr)
        return out


def decode(model, lengths, beam=5, max_len=30):
    src, src_lengths = random_batch(model.encoder.dictionary, lengths, seed=sum(lengths))
    generator = SequenceGenerator(
        [model], model.decoder.dictionary, beam_size=beam, max_len_a=0, max_len_b=max_len
    )
    sample = {"net_input": {"src_tokens": src, "src_lengths": src_lengths}}
    with torch.no_grad():
        return src, generator.generate([model], sample)


@pytest.mark.parametrize(
    "arch, kw",
    [
        ("luong_tiny", dict(attention_window="local-p")),
        ("luong_tiny", dict(attention_window="local-p", **WIDER)),
        ("luong_tiny", dict(attention_window="local-m")),
        ("luong_tiny", dict(attention_window="global", attention_score="concat")),
        ("bahdanau_tiny", dict()),
    ],
    ids=["local-p", "local-p-wider", "local-m", "global-concat", "rnnsearch"],
)
def test_1000_token_source_decodes(arch, kw):
    model = build(arch, n_symbols=1000, **kw)
    assert model.max_positions()[0] is None  # no limit of its own; the task's default is 1024
    src, hyps = decode(model, [1000, 370])  # left-padded batch
    pad = src.eq(model.encoder.dictionary.pad())
    for b, beam in enumerate(hyps):
        assert len(beam) == 5
        for hyp in beam:
            assert torch.isfinite(hyp["positional_scores"]).all()
            attn = hyp["attention"]  # S x T'
            assert attn.shape == (1000, hyp["tokens"].numel())
            assert torch.isfinite(attn).all()
            assert attn[pad[b]].abs().max() == 0 if pad[b].any() else True


def peak_memory(model, S):
    with PeakTensorMemory() as memory:
        decode(model, [S])
    return memory.peak


def test_decode_memory_is_linear_in_source_length():
    """Doubling S doubles the per-S part of the peak: with P(S) = a + b S the
    increments P(1000) - P(500) and P(500) - P(250) have ratio 2; an S x S term
    (one S² mask per step, say) makes it 4."""
    model = build("luong_tiny", n_symbols=1000, attention_window="local-p", **WIDER)
    peaks = {S: peak_memory(model, S) for S in (250, 500, 1000)}
    ratio = (peaks[1000] - peaks[500]) / (peaks[500] - peaks[250])
    assert 1.8 < ratio < 2.2, peaks
    # and a few fp32 vectors per beam row and source token: the K beam copies of
    # h̄_s and W_a h̄_s, the encoder's own states, the K x (T + 2) attention map
    # fairseq keeps (measured: 16 KB per token)
    per_token = (peaks[1000] - peaks[250]) / 750
    K, H, T = 5, 256, 30
    assert per_token < 4 * K * (4 * H + (T + 2)), per_token
