"""luong-explore's embedded data, unit by unit: maps stored and read back, fairseq
lstm's printed rows shifted back, and the records of sentences force-decoded in
left-padded batches (words, links, p_t and windows). On tiny real-text models and in
a real browser: test_explore.py."""

import numpy as np
import pytest
from conftest import build, random_batch, spread_parameters

from luong_plugin.analysis import explore
from luong_plugin.analysis.explore import decode_map, encode_map, right_padded_rows
from luong_plugin.analysis.forced import Pair, force_decode
from luong_plugin.analysis.words import word_index

STEP = 0.5 / explore.LEVELS  # the largest rounding error of a stored weight


# ---- unit: storage, lstm rows, embedded records -------------------------------


def test_maps_round_trip_and_local_rows_keep_only_their_span():
    rng = np.random.default_rng(0)
    dense = rng.dirichlet(np.ones(12), size=5)  # 5 x 12, a global map
    local = np.zeros((5, 40))
    for t in range(5):
        local[t, 3 * t : 3 * t + 7] = rng.dirichlet(
            20 * np.ones(7)
        )  # a window of 7, no weight near 0
    for matrix in (dense, local):
        text = encode_map(matrix)
        assert np.abs(decode_map(text, matrix.shape[1]) - matrix).max() <= STEP + 1e-12
    rows = encode_map(local).split(" ")
    assert [int(r.split(":")[0]) for r in rows] == [3 * t for t in range(5)]
    assert all(len(r.split(":")[1]) <= 7 for r in rows)
    assert len(encode_map(local)) < 0.3 * local.size
    with_unknown = dense.copy()
    with_unknown[:, :2] = np.nan
    assert np.isnan(decode_map(encode_map(with_unknown), 12)[:, :2]).all()


def test_fairseq_lstm_rows_are_shifted_back():
    true = np.array([[0.1, 0.2, 0.3, 0.4], [0.05, 0.05, 0.8, 0.1]])  # 2 target x 4 source
    printed_1 = np.concatenate([true[:, 1:], np.zeros((2, 1))], axis=1)  # 1 padding column
    np.testing.assert_allclose(right_padded_rows(printed_1), true)
    printed_2 = np.concatenate([true[:, 2:], np.zeros((2, 2))], axis=1)
    read = right_padded_rows(printed_2)
    assert np.isnan(read[:, :2]).all()
    np.testing.assert_allclose(read[:, 2:], true[:, 2:])
    np.testing.assert_allclose(right_padded_rows(true), true)  # no padding: as printed
    # row 0: the lost 0.3 could beat the best known piece, so no link; row 1: 0.8 wins
    assert explore.piece_links(np.vstack([read, np.full(4, 0.25)])) == [-1, 2]


def forced_records(model, lengths, batch_size):
    """Force-decode random pairs through ``model`` in left-padded batches and
    return the embedded records (one model) with the exact maps."""
    src_dict = model.encoder.dictionary
    tgt_dict = model.decoder.dictionary
    task = type("Task", (), {"source_dictionary": src_dict, "target_dictionary": tgt_dict})()
    src, _ = random_batch(src_dict, lengths, seed=3)
    tgt, _ = random_batch(tgt_dict, [n + 2 for n in lengths], seed=4)
    pairs = []
    for s, t in zip(src, tgt):
        s, t = s[s.ne(src_dict.pad())], t[t.ne(tgt_dict.pad())]
        # two-piece words: even pieces start a word
        pieces = lambda ids, d: [("▁" if k % 2 == 0 else "") + d[i] for k, i in enumerate(ids[:-1])]
        pairs.append(Pair(pieces(s, src_dict), pieces(t, tgt_dict), s, t))
    forced = list(force_decode([model], task, pairs, batch_size=batch_size))
    m = explore.Model("m", window=explore.window_size(model), kind="forced")
    for i, f in enumerate(forced):
        m.views[i] = explore.View(f.pair.target, f.attention, f.centers)
    records = [
        explore.sentence_record(i, p.source, "", [m], "sentencepiece") for i, p in enumerate(pairs)
    ]
    return records, forced


def test_embedded_maps_are_in_source_order_for_left_padded_batches():
    """A sentence's embedded map is the same whether it was decoded alone or in a
    left-padded batch with longer sentences, and has no column for padding."""
    lengths = [9, 4, 6, 2]
    model = spread_parameters(build("luong_tiny"))
    alone, _ = forced_records(model, lengths, batch_size=1)
    batched, forced = forced_records(model, lengths, batch_size=4)
    for a, b, f, n in zip(alone, batched, forced, lengths):
        assert a["out"][0]["P"] == b["out"][0]["P"]
        assert f.attention.shape[1] == n
        exact = f.attention
        np.testing.assert_allclose(decode_map(b["out"][0]["P"], n), exact, atol=STEP + 1e-7)
        assert b["out"][0]["linkP"] == [int(np.argmax(row[:-1])) for row in exact[:-1]]


def test_embedded_words_merge_pieces_as_luong_align():
    records, forced = forced_records(spread_parameters(build("luong_tiny")), [9, 5], 2)
    for record, f in zip(records, forced):
        out = record["out"][0]
        assert record["srcW"] == [
            p.lstrip("▁") + q for p, q in zip(f.pair.source[::2], f.pair.source[1::2] + [""])
        ]
        assert record["srcI"] == [k // 2 for k in range(len(f.pair.source))]
        # loops: a source word sums its two pieces, a target word averages its two rows
        src_groups = [[k, k + 1] for k in range(0, len(f.pair.source) - 1, 2)]
        src_groups += [[len(f.pair.source) - 1]] if len(f.pair.source) % 2 else []
        src_groups += [[len(f.pair.source)]]  # EOS
        tgt_groups = [[k, k + 1] for k in range(0, len(f.pair.target) - 1, 2)]
        tgt_groups += [[len(f.pair.target) - 1]] if len(f.pair.target) % 2 else []
        tgt_groups += [[len(f.pair.target)]]
        loops = np.array(
            [
                [
                    np.mean([sum(f.attention[r][c] for c in cols) for r in rows])
                    for cols in src_groups
                ]
                for rows in tgt_groups
            ]
        )
        np.testing.assert_allclose(decode_map(out["W"], len(src_groups)), loops, atol=STEP + 1e-7)
        assert out["linkW"] == [int(np.argmax(row[:-1])) for row in loops[:-1]]


@pytest.mark.parametrize(
    "arch,window,local",
    [
        ("luong_tiny", "local-p", True),
        ("luong_tiny", "local-m", True),
        ("luong_tiny", "global", False),
        ("bahdanau_tiny", None, False),
    ],
)
def test_p_t_and_window_only_for_local_windows(arch, window, local):
    overrides = {"attention_window": window} if window else {}
    records, forced = forced_records(spread_parameters(build(arch, **overrides)), [8, 5], 2)
    for record, f in zip(records, forced):
        out = record["out"][0]
        assert ("pt" in out) == local and ("winW" in out) == local
        if local:
            D = 3  # luong_tiny's --window-size
            np.testing.assert_allclose(out["pt"], f.centers, atol=0.005)
            if window == "local-m":  # p_t = t, capped at the last source word
                n_words = len(f.pair.source)
                assert out["pt"] == [float(min(t, n_words - 1)) for t in range(len(out["pt"]))]
            src_i, tgt_i = record["srcI"], word_index(f.pair.target, "sentencepiece")
            words_pt = explore.merge_positions(f.centers, src_i, tgt_i)
            np.testing.assert_allclose(out["ptW"], words_pt, atol=0.005)
            lo = explore.merge_positions(f.centers - D, src_i, tgt_i)
            np.testing.assert_allclose([w[0] for w in out["winW"]], lo, atol=0.005)
