"""Helpers fairseq does not ship: tiny dictionaries, models built by arch name,
padded batches in either padding side."""

import argparse
import os
import sys

import pytest
import torch
from fairseq.data import Dictionary

import luong_plugin  # noqa: F401  (registers the models)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)


class TinyTask:
    def __init__(self, src_dict, tgt_dict):
        self.source_dictionary = src_dict
        self.target_dictionary = tgt_dict


def make_dictionary(n_symbols: int = 20) -> Dictionary:
    d = Dictionary()
    for i in range(n_symbols):
        d.add_symbol(f"w{i}")
    return d


def build(arch: str = "luong_tiny", n_symbols: int = 20, n_tgt_symbols=None, **overrides):
    """Build a model by arch name through fairseq's arch functions, in eval mode.

    The target vocabulary defaults to 3 more symbols than the source one, so a
    mix-up of the two shows up as a shape error."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    args = argparse.Namespace(arch=arch, **overrides)
    ARCH_CONFIG_REGISTRY[arch](args)
    n_tgt_symbols = n_symbols + 3 if n_tgt_symbols is None else n_tgt_symbols
    task = TinyTask(make_dictionary(n_symbols), make_dictionary(n_tgt_symbols))
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    return model.eval()


def random_batch(dictionary, lengths, left_pad=True, seed=0, max_len=None):
    """src_tokens (EOS-terminated, padded on one side) for the given lengths."""
    g = torch.Generator().manual_seed(seed)
    max_len = max_len or max(lengths)
    rows = []
    for n in lengths:
        body = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=g)
        seq = torch.cat([body, torch.tensor([dictionary.eos()])])
        pad = torch.full((max_len - n,), dictionary.pad())
        rows.append(torch.cat([pad, seq]) if left_pad else torch.cat([seq, pad]))
    return torch.stack(rows), torch.tensor(lengths)


def random_prev_output(dictionary, batch_size, length, seed=1):
    g = torch.Generator().manual_seed(seed)
    body = torch.randint(
        dictionary.nspecial, len(dictionary), (batch_size, length - 1), generator=g
    )
    eos = torch.full((batch_size, 1), dictionary.eos())
    return torch.cat([eos, body], dim=1)


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    # the models under test are tiny: thread start-up costs more than it saves,
    # and on a loaded 2-core machine it costs a lot more
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
