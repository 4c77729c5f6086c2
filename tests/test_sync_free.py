"""No host synchronisation inside the decoder's step loop.

On a GPU every value read back to the host (``.item()``, ``bool(tensor)``, ``nonzero``)
stalls the loop until the GPU catches up, once per target step. The ops that do so are
counted as they run (a dispatch mode, on the CPU), in training (forward and backward)
and in incremental decoding: their number may depend on the batch (packing the source
reads its lengths once), never on the number of target steps."""

import pytest
import torch
from conftest import VARIANTS, batch, build, recorded_step_sources
from torch.utils._python_dispatch import TorchDispatchMode

# ops whose output's size or value must reach the host before the next op can be queued
SYNCING = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal", "item", "masked_select",
           "repeat_interleave", "unique", "_unique2", "unique_consecutive"}  # fmt: skip


def _bool_index(func, args) -> bool:
    """x[mask]: aten.index with a boolean index, which runs nonzero inside its kernel."""
    if func.overloadpacket.__name__ not in ("index", "index_put", "index_put_"):
        return False
    indices = args[1] if len(args) > 1 else ()
    return any(i is not None and i.dtype == torch.bool for i in indices)


class CountSyncs(TorchDispatchMode):
    """Counts the ops that read a value back; ``.cpu()`` and ``.tolist()`` of a CPU tensor
    dispatch nothing, so the model's code is also checked for them by name below."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in SYNCING or _bool_index(func, args):
            self.count += 1
        return func(*args, **(kwargs or {}))


def _model(options):
    options = dict(options)
    return build(options.pop("arch", "luong_tiny"), **options)


def _training_syncs(model, target_len, lengths=(9, 4, 7)):
    src, lengths, prev = batch(model, torch.device("cpu"), lengths, target_len=target_len)
    model.train()
    with CountSyncs() as counter:
        logits, _ = model(src, lengths, prev)
        logits.float().sum().backward()
    return counter.count


def _decoding_syncs(model, target_len, lengths=(9, 4, 7)):
    src, lengths, prev = batch(model, torch.device("cpu"), lengths, target_len=target_len)
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


@pytest.mark.parametrize("window", ["local-m", "local-p"])
def test_training_over_long_sources_reads_nothing_back_per_step(window):
    """Sources of several windows, where the training step gathers each window's keys and
    values (attention_step.py's gathered form)."""
    from luong_plugin.modules import attention_step

    model = _model(dict(attention_window=window, attention_score="general"))
    width = model.decoder.attention.window.width
    lengths = (4 * width, 9, attention_step.GATHER_FROM * width)
    with recorded_step_sources() as sources:
        assert _training_syncs(model, 3, lengths) == _training_syncs(model, 11, lengths)
    assert [source.window is not None for source in sources] == [True, True]  # gathered, both


@pytest.mark.parametrize("options", VARIANTS)
def test_decoding_reads_nothing_back_per_step(options):
    model = _model(options)
    assert _decoding_syncs(model, 3) == _decoding_syncs(model, 11)


@pytest.mark.parametrize("window", ["local-m", "local-p"])
def test_decoding_long_sources_off_the_cpu_reads_nothing_back_per_step(window, monkeypatch):
    """Sources of several windows, where decoding on the CPU takes the sliced path, whose
    bounds are read back each step; off the CPU (``reads_back_freely`` False, as on a
    GPU) it gathers instead, and reads nothing back per step."""
    from luong_plugin.modules import attention

    model = _model(dict(attention_window=window, attention_score="general"))
    lengths = (
        4 * model.decoder.attention.window.width,
        9,
        3 * model.decoder.attention.window.width,
    )
    cpu = [_decoding_syncs(model, n, lengths) for n in (3, 11)]
    assert cpu[0] < cpu[1]  # the CPU slices, reading its bounds back: the count sees it
    monkeypatch.setattr(attention, "reads_back_freely", lambda device: False)
    assert _decoding_syncs(model, 3, lengths) == _decoding_syncs(model, 11, lengths)


def test_the_count_sees_a_read_back():
    """The check itself: a loop that reads a value back each step is caught, through
    .item()/float(), a boolean index, masked_select and repeat_interleave."""
    x = torch.arange(6.0)
    reads = [lambda: float(x.sum()), lambda: x[x > 2], lambda: x.masked_select(x > 2),
             lambda: x.repeat_interleave(torch.ones(6, dtype=torch.long))]  # fmt: skip
    for read in reads:
        with CountSyncs() as counter:
            for _ in range(4):
                read()
        assert counter.count >= 4


STEP_LOOP_FILES = ("luong_loop.py", "luong_decoder.py", "bahdanau_decoder.py", "gru.py",
                   "windows.py", "attention.py", "attention_step.py", "position_network.py",
                   "scores.py", "loop_weight.py")  # fmt: skip


def test_the_step_modules_copy_nothing_to_the_host():
    """.cpu(), .tolist(), .numpy() copy to the host and dispatch nothing on a CPU tensor:
    the modules the step loop runs hold none of them."""
    import os

    import luong_plugin.modules as modules

    folder = os.path.dirname(modules.__file__)
    for name in STEP_LOOP_FILES:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            code = f.read()
        for call in (".cpu()", ".tolist()", ".numpy()", ".item()"):
            assert call not in code, f"{name} calls {call}"
