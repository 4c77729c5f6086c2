"""The analysis tools: word merging, AER, BLEU by length, learning curves, unk
dictionaries (pure, against hand-computed values); forced decoding against
what fairseq-generate --print-alignment prints, heatmaps and --replace-unk with
our dictionary on a tiny real-text model (test_analysis_models.py)."""

import os
import sys

import numpy as np
import pytest
from conftest import assert_png

from luong_plugin.analysis import aer, bleu_by_length, curves, words
from luong_plugin.analysis.unk_dict import build_dictionary


def test_every_tool_is_a_console_script_with_help(capsys):
    import importlib
    import tomllib

    from conftest import REPO

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    tools = {
        "align",
        "aer",
        "heatmap",
        "explore",
        "bleu_by_length",
        "curves",
        "unk_dict",
        "position_trace",
    }
    assert {target.split(":")[0].rsplit(".", 1)[1] for target in scripts.values()} == tools
    for name, target in scripts.items():
        module, function = target.split(":")
        with pytest.raises(SystemExit) as exit:
            getattr(importlib.import_module(module), function)(["--help"])
        assert exit.value.code == 0
        assert "usage:" in capsys.readouterr().out
        assert os.path.exists(os.path.join(os.path.dirname(sys.executable), name))


# ---- subword pieces -> words ----------------------------------------------


def test_word_index_per_scheme():
    spm = ["▁la", "▁cas", "a", "▁", "de"]
    assert words.word_index(spm, "sentencepiece") == [0, 1, 1, 2, 2]
    assert words.word_index(["la", "cas@@", "a", "d@@", "e@@", "l"], "bpe") == [0, 1, 1, 2, 2, 2]
    assert words.word_index(["la", "casa"], "none") == [0, 1]
    assert words.words(spm, "sentencepiece") == ["la", "casa", "de"]
    assert words.words(["la", "cas@@", "a"], "bpe") == ["la", "casa"]
    assert words.detect_scheme([["▁a", "b"]]) == "sentencepiece"
    assert words.detect_scheme([["a@@", "b"]]) == "bpe"
    assert words.detect_scheme([["a", "b"]]) == "none"
    with pytest.raises(ValueError, match="--subword 'wordpiece'.*sentencepiece, bpe, none"):
        words.word_index(["a"], "wordpiece")


def loop_merge(matrix, src_groups, tgt_groups):
    """Word attention by loops: sum over a source word's pieces, mean over a
    target word's pieces (EOS, the last row/column, is a word of its own)."""
    src_groups = src_groups + [[len(matrix[0]) - 1]]
    tgt_groups = tgt_groups + [[len(matrix) - 1]]
    return [
        [sum(sum(matrix[r][c] for c in cols) for r in rows) / len(rows) for cols in src_groups]
        for rows in tgt_groups
    ]


def test_merge_attention_sums_source_pieces_and_averages_target_pieces():
    rng = np.random.default_rng(0)
    src = ["▁el", "▁prin", "ci", "pio", "▁cre", "ó"]  # 3 words
    tgt = ["▁In", "▁the", "▁begin", "ning"]  # 3 words
    matrix = rng.dirichlet(np.ones(len(src) + 1), size=len(tgt) + 1)  # rows sum to 1
    merged = words.merge_attention(
        matrix, words.word_index(src, "sentencepiece"), words.word_index(tgt, "sentencepiece")
    )
    expected = loop_merge(matrix.tolist(), [[0], [1, 2, 3], [4, 5]], [[0], [1], [2, 3]])
    np.testing.assert_allclose(merged, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(merged.sum(axis=1), 1.0)  # still distributions
    with pytest.raises(ValueError, match="expected 5 x 7"):
        words.merge_attention(
            matrix[:, :-1],
            words.word_index(src, "sentencepiece"),
            words.word_index(tgt, "sentencepiece"),
        )


def test_hard_alignment_skips_both_eos():
    word_attention = np.array(
        [
            [0.1, 0.7, 0.2],  # target 0 -> source 1
            [0.2, 0.1, 0.7],  # target 1: the EOS column wins but is excluded -> source 0
            [0.0, 0.0, 1.0],  # target EOS: no link
        ]
    )
    assert words.hard_alignment(word_attention) == [(1, 0), (0, 1)]
    assert words.format_pharaoh([(1, 0), (0, 1)]) == "1-0 0-1"
    assert words.hard_alignment(np.ones((2, 1))) == []  # empty source


def test_merge_positions_maps_p_t_onto_words():
    src_index = [0, 1, 1, 2]  # pieces 0 | 1 2 | 3, EOS piece 4 = word 3
    tgt_index = [0, 0, 1]  # pieces 0 1 | 2, EOS piece 3
    # piece positions 0, 1.5 (between two pieces of word 1), 3, 4 (EOS)
    centers = words.merge_positions(np.array([0.0, 1.5, 3.0, 4.0]), src_index, tgt_index)
    np.testing.assert_allclose(centers, [(0.0 + 1.0) / 2, 2.0, 3.0])


# ---- AER ------------------------------------------------------------------


def test_aer_hand_computed():
    sure = {(0, 0), (1, 1)}
    possible = sure | {(2, 1)}
    hyp = {(0, 0), (2, 1), (2, 2)}
    # |A∩S| = 1, |A∩P| = 2, |A| = 3, |S| = 2: AER = 1 - 3/5
    result = aer.score([hyp], [(sure, possible)])
    assert result["aer"] == pytest.approx(0.4)
    assert result["precision"] == pytest.approx(2 / 3) and result["recall"] == pytest.approx(0.5)
    assert aer.score([sure], [(sure, possible)])["aer"] == 0.0
    assert aer.score([{(2, 1)}], [(sure, possible)])["aer"] == pytest.approx(1 - 1 / 3)
    # possible links given without their sure ones still count sure links as possible
    assert aer.score([hyp], [(sure, {(2, 1)})])["aer"] == pytest.approx(0.4)


def test_aer_is_summed_over_the_corpus_not_averaged():
    gold = [({(0, 0)}, {(0, 0)}), ({(0, 0), (1, 1), (2, 2)}, {(0, 0), (1, 1), (2, 2)})]
    hyp = [{(0, 0)}, {(0, 1), (1, 2), (2, 0)}]
    # sentence AERs 0 and 1 (mean 0.5); corpus: 1 - (1 + 1) / (4 + 4) = 0.75
    assert aer.score(hyp, gold)["aer"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="2 hypothesis sentences but 1 gold"):
        aer.score(hyp, gold[:1])


def test_aer_reads_both_gold_formats(tmp_path, capsys):
    pharaoh = tmp_path / "gold.talp"
    pharaoh.write_text("1-1 2-2 3p2\n1-2\n")
    rwth = tmp_path / "gold.rwth"
    rwth.write_text("SENT: 0\nS 1 1\nS 2 2\nP 3 2\nSENT: 1\nS 1 2\n")
    expected = [({(0, 0), (1, 1)}, {(0, 0), (1, 1), (2, 1)}), ({(0, 1)}, {(0, 1)})]
    assert aer.read_gold(str(pharaoh)) == expected
    assert aer.read_gold(str(rwth)) == expected
    assert aer.read_gold(str(pharaoh), reverse=True)[1] == ({(1, 0)}, {(1, 0)})
    assert aer.read_gold(str(pharaoh), base=0)[1] == ({(1, 2)}, {(1, 2)})
    hyp = tmp_path / "hyp.align"
    hyp.write_text("0-0 2-1 2-2\n0-1\n")
    aer.main([str(rwth), str(hyp)])
    # |A∩S| = 1 + 1, |A∩P| = 2 + 1, |A| = 4, |S| = 3: 1 - 5/7
    assert f"AER {1 - 5 / 7:.4f}" in capsys.readouterr().out


def test_aer_refuses_bad_input(tmp_path):
    zero_based = tmp_path / "gold0"
    zero_based.write_text("0-0 1-1\n")
    with pytest.raises(ValueError, match="pass --gold-base 0"):
        aer.read_gold(str(zero_based))
    bad = tmp_path / "bad"
    bad.write_text("1:1\n")
    with pytest.raises(ValueError, match="'1:1' is not a link"):
        aer.read_gold(str(bad))
    with pytest.raises(ValueError, match="--gold-format 'xml'"):
        aer.read_gold(str(zero_based), fmt="xml")
    with pytest.raises(SystemExit):  # a hypothesis with possible links
        aer.main([str(zero_based), str(bad), "--gold-base", "0"])


# ---- BLEU by length --------------------------------------------------------


def test_buckets_follow_the_edges():
    lengths = [3, 10, 11, 25, 70]
    assert bleu_by_length.buckets(lengths, [10, 20, 30]) == [
        ("1-10", [0, 1]),
        ("11-20", [2]),
        ("21-30", [3]),
        (">30", [4]),
    ]
    assert bleu_by_length.buckets([5], [10, 20]) == [("1-10", [0])]  # empty groups left out
    for bad in ("20,10", "0,10", "ten"):
        with pytest.raises(ValueError, match="--edges"):
            bleu_by_length.parse_edges(bad)


def test_bleu_by_length_scores_each_group(tmp_path, capsys):
    from sacrebleu.metrics import BLEU

    source = ["uno dos", "a b c d e f g h i j k l", "x y z", "p q r s t u v w x y z a b"]
    reference = [
        "the cat sat on the mat",
        "a dog ran in the park today",
        "it is raining now",
        "we will meet again tomorrow at noon",
    ]
    perfect = list(reference)
    mixed = [
        "the cat sat on a mat",
        "nothing alike here",
        "it is raining now",
        "we meet tomorrow at noon",
    ]
    groups, table, overall, _ = bleu_by_length.bleu_by_length(
        source, reference, {"perfect": perfect, "mixed": mixed}, [5]
    )
    assert groups == [("1-5", [0, 2]), (">5", [1, 3])]
    assert table["perfect"] == pytest.approx([100.0, 100.0])
    bleu = BLEU()
    assert table["mixed"][0] == pytest.approx(
        bleu.corpus_score([mixed[0], mixed[2]], [[reference[0], reference[2]]]).score
    )
    assert table["mixed"][1] == pytest.approx(
        bleu.corpus_score([mixed[1], mixed[3]], [[reference[1], reference[3]]]).score
    )
    assert overall["mixed"] == pytest.approx(bleu.corpus_score(mixed, [reference]).score)

    for name, lines in [("src", source), ("ref", reference), ("a", perfect), ("b", mixed)]:
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    png = tmp_path / "len.png"
    bleu_by_length.main(
        [
            f"perfect={tmp_path / 'a'}",
            str(tmp_path / "b"),
            "--source",
            str(tmp_path / "src"),
            "--reference",
            str(tmp_path / "ref"),
            "--edges",
            "5",
            "--png",
            str(png),
        ]
    )
    out = capsys.readouterr().out
    assert "| source words | sentences | perfect |" in out
    assert "| 1-5 | 2 | 100.00 |" in out and "tok:13a" in out
    assert_png(png, 640, 400)
    (tmp_path / "short").write_text("one line\n")
    with pytest.raises(SystemExit):
        bleu_by_length.main(
            [
                str(tmp_path / "short"),
                "--source",
                str(tmp_path / "src"),
                "--reference",
                str(tmp_path / "ref"),
            ]
        )


# ---- learning curves -------------------------------------------------------

SIMPLE_LOG = """\
2026-11-22 02:29:22 | INFO | train_inner | epoch 001:     10 / 69 loss=9.39, ppl=670.9, wps=3127.1, num_updates=10, lr=0.01, wall=8
2026-11-22 02:29:29 | INFO | train_inner | epoch 001:     20 / 69 loss=8.06, ppl=266.9, wps=1649.6, num_updates=20, lr=0.01, wall=16
2026-11-22 02:29:43 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.815 | ppl 225.26 | wps 3732.6 | num_updates 20
2026-11-22 02:29:43 | INFO | train | epoch 001 | loss 8.355 | ppl 327.46 | num_updates 20 | wall 30
"""  # noqa: E501
JSON_LOG = """\
2026-11-22 02:30:09 | INFO | train_inner | {"epoch": 1, "update": 0.145, "loss": "9.407", "nll_loss": "9.3", "ppl": "630.35", "num_updates": "10"}
2026-11-22 02:30:29 | INFO | valid | {"epoch": 1, "valid_loss": "7.812", "valid_nll_loss": "7.6", "valid_ppl": "194.01", "valid_num_updates": "10"}
2026-11-22 02:30:30 | INFO | valid | {"epoch": 2, "valid_loss": "7.5", "valid_nll_loss": "7.3", "valid_ppl": "157.59", "valid_num_updates": "20"}
"""  # noqa: E501


def test_curves_read_simple_and_json_logs(tmp_path, capsys):
    (tmp_path / "a").mkdir()
    simple, js = tmp_path / "a" / "train.log", tmp_path / "b.log"
    simple.write_text(SIMPLE_LOG)
    js.write_text(JSON_LOG)
    run = curves.read_log(str(simple))
    assert curves.series(run.train_inner, "ppl") == ([10.0, 20.0], [670.9, 266.9])
    assert curves.series(run.valid, "loss") == ([20.0], [7.815])
    assert curves.series(run.valid, "nll_loss") == ([20.0], [7.815])  # cross_entropy log
    run = curves.read_log(str(js))
    assert curves.series(run.train_inner, "nll_loss") == ([10.0], [9.3])
    assert curves.series(run.valid, "ppl") == ([10.0, 20.0], [194.01, 157.59])
    png = tmp_path / "curves.png"
    curves.main([str(simple), f"json={js}", "--png", str(png)])
    out = capsys.readouterr().out
    assert "| a | 20 | 266.900 | 225.260 (20) |" in out
    assert "| json | 20 | 630.350 | 157.590 (20) |" in out
    assert_png(png, 640, 420)
    with pytest.raises(ValueError, match="--metric 'bleu'"):
        curves.series(run.valid, "bleu")
    (tmp_path / "empty.log").write_text("nothing here\n")
    with pytest.raises(ValueError, match="no train_inner/train/valid records"):
        curves.read_log(str(tmp_path / "empty.log"))


# ---- unk dictionary --------------------------------------------------------


def test_unk_dictionary_takes_the_most_frequent_aligned_word():
    aligned = [
        (["casa", "blanca"], ["white", "house"], [(1, 0), (0, 1)]),
        (["la", "casa"], ["the", "home"], [(0, 0), (1, 1)]),
        (["casa", "<unk>"], ["house", "x"], [(0, 0), (1, 1)]),
        (["blanca"], ["white"], [(0, 0)]),
        (["la"], ["<unk>"], [(0, 0)]),  # <unk> is never an entry
        (["sol"], ["sun"], [(0, 0)]),
        (["sol"], ["son"], [(0, 0)]),  # a tie: the first seen wins
    ]
    # casa: house 2, home 1; most links first, equal counts in first-seen order
    assert build_dictionary(aligned) == [
        ("blanca", "white", 2),
        ("casa", "house", 2),
        ("la", "the", 1),
        ("sol", "sun", 1),
    ]
    assert build_dictionary(aligned, min_count=2) == [("blanca", "white", 2), ("casa", "house", 2)]
