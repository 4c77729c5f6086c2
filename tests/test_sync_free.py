"""No host synchronisation inside the decoder's step loop.

On a GPU every value read back to the host (``.item()``, ``bool(tensor)``, ``nonzero``)
stalls the loop until the GPU catches up, once per target step. The ops that do so are
counted as they run (a dispatch mode, on the CPU), in training (forward and backward)
and in incremental decoding: their number may depend on the batch (packing the source
reads its lengths once), never on the number of target steps."""

import pytest
import torch
from conftest import VARIANTS, batch, build
from torch.utils._python_dispatch import TorchDispatchMode

SYNCING = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "item"}


class CountSyncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in SYNCING:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _model(options):
    options = dict(options)
    return build(options.pop("arch", "luong_tiny"), **options)


def _training_syncs(model, target_len):
    src, lengths, prev = batch(model, torch.device("cpu"), target_len=target_len)
    model.train()
    with CountSyncs() as counter:
        logits, _ = model(src, lengths, prev)
        logits.float().sum().backward()
    return counter.count


def _decoding_syncs(model, target_len):
    src, lengths, prev = batch(model, torch.device("cpu"), target_len=target_len)
    model.eval()
    with torch.no_grad(), CountSyncs() as counter:
        encoder_out = model.encoder(src, lengths)
        state = {}
        for t in range(target_len):
            model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)
    return counter.count


@pytest.mark.parametrize("options", VARIANTS)
def test_training_step_loop_reads_nothing_back_per_step(options):
    model = _model(options)
    assert _training_syncs(model, 3) == _training_syncs(model, 11)


@pytest.mark.parametrize("options", VARIANTS)
def test_decoding_reads_nothing_back_per_step(options):
    model = _model(options)
    assert _decoding_syncs(model, 3) == _decoding_syncs(model, 11)


def test_the_count_sees_a_read_back():
    """The check itself: a loop that reads a value back each step is caught."""
    with CountSyncs() as counter:
        x = torch.ones(3)
        for _ in range(4):
            x = x * 2
            float(x.sum())
    assert counter.count == 4
