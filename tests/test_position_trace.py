"""luong-position-trace: its statistics on hand-built forced decodings, and the
gradient share of W_p and v_p against a direct computation."""

import math

import numpy as np
import pytest
import torch
from conftest import build, make_dictionary, random_batch, spread_parameters

from luong_plugin.analysis.forced import Forced, Pair
from luong_plugin.analysis.position_trace import gradient_share, position_stats


def _forced(n, m, centers, row_mass=1.0):
    """n source words, m target words; every row puts ``row_mass`` on one word."""
    pair = Pair(["s"] * n, ["t"] * m, torch.zeros(n + 1), torch.zeros(m + 1))
    attention = np.zeros((m + 1, n + 1))
    attention[:, 0] = row_mass
    return Forced(pair, attention, np.asarray(centers + [0.0], dtype=float))


def test_diagonal_positions_correlate_fully():
    forced = [_forced(10, 5, [0.0, 2.0, 4.0, 6.0, 8.0]), _forced(6, 3, [0.0, 2.0, 4.0])]
    stats = position_stats(forced)
    assert math.isclose(stats["corr"], 1.0, abs_tol=1e-12)
    assert stats["p0"] == 0.0
    assert math.isclose(stats["at_edge"], 2 / 8)  # the two p_0 = 0


def test_flat_positions_and_mass():
    forced = [_forced(10, 4, [9.8, 9.7, 9.9, 9.6], row_mass=0.25)]
    stats = position_stats(forced)
    assert stats["at_edge"] == 1.0  # all beyond n - 0.5
    assert math.isclose(stats["mass"], 0.25) and math.isclose(stats["mass0"], 0.25)
    assert math.isclose(stats["p0"], 0.98)
    assert stats["corr"] < -0.3  # 9.8, 9.7, 9.9, 9.6 against 0, .25, .5, .75


def test_models_without_positions_are_refused():
    f = _forced(3, 2, [0.0, 1.0])
    f.centers = None
    with pytest.raises(ValueError, match="p_t"):
        position_stats([f])


def test_gradient_share_is_the_norm_ratio():
    model = spread_parameters(build("luong_tiny", attention_window="local-p"))
    d = model.encoder.dictionary
    src, _ = random_batch(d, [6, 4, 5], left_pad=False)
    pairs = []
    for row in src:
        tokens = row[row.ne(d.pad())]
        target = torch.cat([tokens[:-1] % 20 + d.nspecial, tokens[-1:]])
        pairs.append(Pair([], [], tokens, target))

    class Task:
        source_dictionary = target_dictionary = make_dictionary()

    share = gradient_share(model, Task(), pairs, batches=1, batch_size=3)
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is None or float(g.abs().sum()) == 0 for g in grads.values())  # zeroed after
    assert 0 < share["grad_share"] < 1 and share["grad_norm"] > 0

    # the same ratio, computed here: the gradient of W_p and v_p alone
    model.zero_grad()
    share_again = gradient_share(model, Task(), pairs, batches=1, batch_size=3)
    assert share_again == share
    model.decoder.attention.window.W_p.weight.requires_grad_(False)
    model.decoder.attention.window.v_p.weight.requires_grad_(False)
    assert gradient_share(model, Task(), pairs, batches=1, batch_size=3)["grad_share"] == 0


def test_rows_replot_from_json(tmp_path):
    import json

    from luong_plugin.analysis.position_trace import main

    rows = [
        {"updates": u, "corr": c, "p0": 0.5, "mass": 0.4, "at_edge": 0.1}
        for u, c in [(250, -0.5), (500, 0.9)]
    ]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    main(["--from-json", str(tmp_path / "rows.json"), "--png", str(tmp_path / "t.png")])
    assert (tmp_path / "t.png").stat().st_size > 1000
    with pytest.raises(SystemExit):
        main(["--from-json", str(tmp_path / "rows.json"), "--path", "a.pt"])
    with pytest.raises(SystemExit):
        main(["--png", str(tmp_path / "t.png")])
