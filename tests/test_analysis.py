"""Reading fairseq-generate output, heatmaps and the demo report."""

import json
import math
import os

import numpy as np
import pytest

from luong_plugin.analysis.generate_output import decode_pieces, parse_generate
from luong_plugin.analysis.heatmap import plot_attention
from luong_plugin.analysis.report import main as report_main

OUTPUT = """S-1\t▁la ▁casa ▁de ▁Jehová
T-1\t▁the ▁house ▁of ▁the ▁Lord
H-1\t-0.5\t▁the ▁house ▁of ▁the ▁Lord
D-1\t-0.5\tthe house of the Lord
P-1\t-0.1 -0.2 -0.3 -0.1 -0.1 -0.1
A-1\t0.9,0.05,0.05,0,0 0.1,0.8,0.1,0,0 0.2,0.2,0.6,0,0 0.2,0.2,0.6,0,0 0,0,0,1,0 0,0,0,0.1,0.9
S-0\t▁E n ▁el ▁principio
T-0\t▁In ▁the ▁beginning ▁God ▁created
H-0\t-0.25\t▁In ▁the ▁beginning ▁God ▁created
A-0\t0.7,0.1,0.1,0.1,0 0.1,0.6,0.2,0.1,0 0,0.1,0.8,0.1,0 0,0,0.1,0.8,0.1 0,0,0.1,0.8,0.1 0,0,0,0,1
Generate test with beam=5: BLEU4 = 12.0
"""


def test_parse_generate_reads_every_field():
    rows = parse_generate(OUTPUT)
    assert sorted(rows) == [0, 1]
    assert rows[1].hypothesis == "▁the ▁house ▁of ▁the ▁Lord" and rows[1].score == -0.5
    assert rows[1].attention[0] == [0.9, 0.05, 0.05, 0.0, 0.0]
    assert decode_pieces(rows[0].source) == "En el principio"
    assert len(rows[0].attention) == len(rows[0].hypothesis.split()) + 1
    assert all(len(r) == len(rows[0].source.split()) + 1 for r in rows[0].attention)


def test_heatmap_is_a_real_png(tmp_path):
    import matplotlib.image as mpimg

    rows = parse_generate(OUTPUT)
    row = rows[0]
    path = plot_attention(
        row.attention,
        row.source.split() + ["</s>"],
        row.hypothesis.split() + ["</s>"],
        str(tmp_path / "a.png"),
        centers=[0.2, 1.1, 2.0, 3.4, 3.5, 4.0],
    )
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    image = mpimg.imread(path)
    assert image.shape[0] >= 300 and image.shape[1] >= 400
    assert np.ptp(image[..., :3]) > 0.5  # not a blank picture


def test_report_scores_with_signatures(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(OUTPUT, encoding="utf-8")
    ref = tmp_path / "test.en"
    ref.write_text("In the beginning God created\nthe house of the Lord\n", encoding="utf-8")
    report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "sacreBLEU 100.00" in out and "nrefs:1|case:mixed|eff:no|tok:13a" in out
    assert "chrF2     100.00" in out
    hyp = (tmp_path / "test.hyp").read_text(encoding="utf-8")
    assert hyp == "In the beginning God created\nthe house of the Lord\n"
    assert os.path.exists(tmp_path / "attention_0.png")
    saved = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert saved["bleu"] == 100.0 and saved["chrf"] == 100.0 and saved["sentences"] == 2
    assert saved["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert saved["training"] is None  # no --train-log given


def test_report_gives_bleus_length_ratio_brevity_penalty_and_precisions(tmp_path, capsys):
    """One hypothesis cut to its first three words: 8 hypothesis tokens against 10 reference
    tokens, every n-gram of it in the reference. sacreBLEU's definition by hand: ratio 0.8,
    brevity penalty exp(1 - 10 / 8) = 0.7788, precisions 100%, BLEU 100 x 0.7788."""
    short = "\n".join(line for line in OUTPUT.splitlines() if not line.startswith("A-0"))
    short = short.replace(
        "H-0\t-0.25\t▁In ▁the ▁beginning ▁God ▁created", "H-0\t-0.25\t▁In ▁the ▁beginning"
    )
    gen = tmp_path / "gen.txt"
    gen.write_text(short + "\n", encoding="utf-8")
    ref = tmp_path / "test.en"
    ref.write_text("In the beginning God created\nthe house of the Lord\n", encoding="utf-8")
    report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    penalty = math.exp(1 - 10 / 8)
    assert saved["length_ratio"] == 0.8
    assert saved["brevity_penalty"] == round(penalty, 3)
    assert saved["bleu_precisions"] == [100.0] * 4
    assert saved["bleu"] == round(100 * penalty, 2)
    assert "length ratio 0.8 (hypothesis / reference tokens)" in capsys.readouterr().out


TRAIN_LOG = """\
2026-11-25 23:30:01 | INFO | train_inner | epoch 001:    100 / 560 loss=9.1, ppl=550.2, num_updates=100, wall=40
2026-11-25 23:33:10 | INFO | valid | epoch 008 | valid on 'valid' subset | loss 4.402 | nll_loss 2.993 | ppl 7.96 | wps 9000 | num_updates 4480 | best_loss 4.402
2026-11-25 23:34:50 | INFO | valid | epoch 009 | valid on 'valid' subset | loss 4.466 | nll_loss 3.015 | ppl 8.1 | wps 9000 | num_updates 5040 | best_loss 4.402
2026-11-25 23:35:40 | INFO | valid | epoch 010 | valid on 'valid' subset | loss 4.405 | nll_loss 2.991 | ppl 7.95 | wps 9000 | num_updates 5320 | best_loss 4.402
2026-11-25 23:35:41 | INFO | fairseq_cli.train | done training in 900.2 seconds
2026-11-25 23:35:41 | INFO | train | epoch 010 | loss 4.1 | num_updates 5320 | wall 901
"""


def test_report_names_the_validation_checkpoint_best_holds(tmp_path, capsys):
    """The lowest perplexity (5,320) and the lowest label-smoothed loss, by which fairseq
    keeps checkpoint_best.pt (4,480), are two validations here: both are reported."""
    gen = tmp_path / "gen.txt"
    gen.write_text(OUTPUT, encoding="utf-8")
    ref = tmp_path / "test.en"
    ref.write_text("In the beginning God created\nthe house of the Lord\n", encoding="utf-8")
    log = tmp_path / "train.log"
    log.write_text(TRAIN_LOG, encoding="utf-8")
    report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path),
                 "--train-log", str(log)])  # fmt: skip
    out = capsys.readouterr().out
    assert "training: 5320 updates in 901 s, best valid perplexity 7.95" in out
    assert "checkpoint_best.pt holds update 4480: valid loss 4.402, perplexity 7.96" in out
    training = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["training"]
    assert training["valid_ppl"] == 7.95 and training["updates"] == 5320
    assert training["best_checkpoint"] == {"update": 4480, "valid_loss": 4.402, "valid_ppl": 7.96}
    # a later validation of the same loss replaces it, as fairseq's `<=` does
    log.write_text(TRAIN_LOG.replace("loss 4.405 |", "loss 4.402 |"), encoding="utf-8")
    report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path),
                 "--train-log", str(log)])  # fmt: skip
    training = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["training"]
    assert training["best_checkpoint"]["update"] == 5320


def test_report_scores_output_decoded_without_alignments(tmp_path, capsys):
    gen = tmp_path / "gen.txt"
    gen.write_text(
        "".join(line + "\n" for line in OUTPUT.splitlines() if not line.startswith("A-"))
    )
    ref = tmp_path / "test.en"
    ref.write_text("In the beginning God created\nthe house of the Lord\n", encoding="utf-8")
    report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path)])
    assert "no attention heatmap: decode with --print-alignment soft" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))["bleu"] == 100.0
    assert not any(name.startswith("attention_") for name in os.listdir(tmp_path))


def test_report_refuses_missing_sentences(tmp_path):
    gen = tmp_path / "gen.txt"
    gen.write_text(OUTPUT, encoding="utf-8")
    ref = tmp_path / "test.en"
    ref.write_text("a\nb\nc\n", encoding="utf-8")
    with pytest.raises(SystemExit):
        report_main([str(gen), "--reference", str(ref), "--out-dir", str(tmp_path)])
