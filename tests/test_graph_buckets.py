"""bench/graph_buckets.py: fairseq's batching of lengths, the buckets as DecoderGraphs puts
batches in them, and the share graphed, against counts made by hand."""

import os
import sys

import numpy as np
import pytest
from conftest import REPO, build

from luong_plugin.modules.cuda_graphs import DecoderGraphs

sys.path.insert(0, os.path.join(REPO, "bench"))
import graph_buckets  # noqa: E402


def test_batches_sort_filter_and_cut_as_fairseq():
    """Pair 2 is too long; the rest sorted by source, then target length; two a batch."""
    src, tgt = np.array([5, 3, 9, 3]), np.array([4, 6, 2, 1])
    found = graph_buckets.batches(src, tgt, batch_size=2, max_len=8)
    assert found == [(2, 3, 6, 7), (1, 5, 4, 4)]  # pairs 3 and 1, then pair 0


def test_buckets_are_the_decoders():
    model = build(attention_window="local-p", attention_score="general")
    graphs = DecoderGraphs(model.decoder, step=8, limit=4)
    for b, s, t in [(128, 51, 49), (3, 8, 9), (97, 17, 1)]:
        assert graph_buckets.bucket((b, s, t, 0), 8) == graphs.bucket(b, s, t)


def test_the_share_graphed_and_the_padding():
    found = [(128, 10, 12, 1000), (128, 10, 12, 900), (128, 30, 30, 3000)]
    every = graph_buckets.coverage(found, step=8, limit=2, epochs=2)
    # buckets (128, 16, 16) twice and (128, 32, 32): both graphed
    padding = (2 * 128 * 16 + 128 * 32) / (2 * 128 * 12 + 128 * 30)
    assert every == [{"epoch": e, "graphed_share": 1.0, "padding": round(padding, 4)}
                     for e in (1, 2)]  # fmt: skip
    one = graph_buckets.coverage(found, step=8, limit=1, epochs=3)
    assert one[0]["graphed_share"] in (round(1900 / 4900, 4), round(3000 / 4900, 4))
    assert one[0] == dict(one[2], epoch=1)  # the first bucket met keeps its graph


def test_the_command_needs_a_batch_size_or_max_tokens(capsys):
    with pytest.raises(SystemExit):
        graph_buckets.main(["--data", "d", "--src", "a", "--tgt", "b"])
    assert "--batch-size or --max-tokens" in capsys.readouterr().err
