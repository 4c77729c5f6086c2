"""The analysis tools on a tiny real-text model trained through fairseq's entry
points: forced decoding against what fairseq-generate --print-alignment prints,
heatmaps, learning curves from a real log, and --replace-unk with our dictionary."""

import argparse

import numpy as np
import pytest
from conftest import assert_png, fairseq, generate, generate_args, parse, train
from test_analysis_tools import loop_merge

from luong_plugin.analysis import curves

# ---- on a tiny real-text model (fairseq entry points) ---------------------


MODELS = {
    "local-p": ("luong_tiny", "--attention-window", "local-p"),
    "rnnsearch": ("bahdanau_tiny",),
}
UPDATES = {"local-p": 15, "rnnsearch": 5}


@pytest.fixture(scope="module")
def tiny(bible, tmp_path_factory):
    root = tmp_path_factory.mktemp("analysis")
    paths = {}
    for name, (arch, *options) in MODELS.items():
        log = train(
            bible / "bin",
            root / name,
            *options,
            "--log-interval",
            "5",
            arch=arch,
            updates=UPDATES[name],
        )
        (root / name / "train.log").write_text(log)
        paths[name] = root / name / "checkpoint_last.pt"
    return paths


def forced_args(path, data, *extra):
    from luong_plugin.analysis.forced import add_forced_args

    parser = argparse.ArgumentParser()
    add_forced_args(parser)
    return parser.parse_args(["--path", str(path), "--data", str(data), *map(str, extra)])


def sentencepiece_groups(pieces):
    groups = []
    for k, piece in enumerate(pieces):
        if k == 0 or piece.startswith("▁"):
            groups.append([k])
        else:
            groups[-1].append(k)
    return groups


@pytest.mark.slow
def test_forced_decoding_reproduces_generate_soft_alignment(bible, tiny, tmp_path):
    """Forced decoding of the model's own beam output gives exactly the attention
    fairseq-generate --print-alignment soft prints, and luong-align's word links
    are the argmax of those maps merged by loops (sum over source pieces, mean
    over target pieces). The local-p model: its attention depends on p_t, its
    maps on the source reversal and the padding (the bahdanau decoder shares the
    layout code, tested end to end in test_end_to_end)."""
    from luong_plugin.analysis.forced import force_decode, load_inputs

    model = "local-p"
    out = generate(bible / "bin", tiny[model], "--print-alignment", "soft")
    sources, hyps, soft = parse(out, "S"), parse(out, "H"), parse(out, "A")
    ids = sorted(hyps)
    assert len(ids) == 29
    printed = {
        i: np.array([[float(p) for p in row.split(",")] for row in soft[i].split()]) for i in ids
    }

    args = forced_args(tiny[model], bible / "bin")
    models, task, pairs, scheme = load_inputs(
        args, [sources[i] for i in ids], [hyps[i] for i in ids]
    )
    assert scheme == "sentencepiece"
    for i, forced in zip(ids, force_decode(models, task, pairs, batch_size=7)):
        assert forced.attention.shape == printed[i].shape
        np.testing.assert_allclose(forced.attention, printed[i], rtol=0, atol=1e-5)
        # p_t is in the units of the columns: luong_tiny's window, D = 3 around
        # floor(p_t), holds every non-zero weight of its row
        assert forced.centers.shape == (len(hyps[i].split()) + 1,)
        for row, center in zip(forced.attention, forced.centers):
            assert (np.abs(np.nonzero(row > 0)[0] - np.floor(center)) <= 3).all()

    (tmp_path / "src").write_text("".join(sources[i] + "\n" for i in ids))
    (tmp_path / "hyp").write_text("".join(hyps[i] + "\n" for i in ids))
    fairseq(
        "luong-align",
        "--path",
        tiny[model],
        "--data",
        bible / "bin",
        "--source",
        tmp_path / "src",
        "--target",
        tmp_path / "hyp",
        "--out",
        tmp_path / "align",
    )
    lines = (tmp_path / "align").read_text().splitlines()
    checked = 0
    for i, line in zip(ids, lines):
        src_groups = sentencepiece_groups(sources[i].split())
        tgt_groups = sentencepiece_groups(hyps[i].split())
        merged = np.array(loop_merge(printed[i].tolist(), src_groups, tgt_groups))
        links = [tuple(map(int, link.split("-"))) for link in line.split()]
        assert [j for _, j in links] == list(range(len(tgt_groups)))
        for src_word, j in links:
            row = merged[j, :-1]
            best = sorted(row)[-2:] if len(row) > 1 else [0.0, row[0]]
            if best[1] - best[0] > 1e-4:  # not a near-tie the 6 printed decimals blur
                assert src_word == int(np.argmax(row))
                checked += 1
    assert checked > 0.5 * sum(len(sentencepiece_groups(hyps[i].split())) for i in ids)


@pytest.mark.slow
def test_heatmap_of_a_raw_pair_marks_p_t_for_local_p_only(bible, tiny, tmp_path, capsys):
    from luong_plugin.analysis.heatmap import main as heatmap

    pair = [
        "--source-sentence",
        "En el principio creó Dios los cielos y la tierra.",
        "--target-sentence",
        "In the beginning, God created the heavens and the earth.",
    ]
    reds = {}
    for model in MODELS:
        png = tmp_path / f"{model}.png"
        heatmap(
            [
                "--path",
                str(tiny[model]),
                "--data",
                str(bible / "bin"),
                "--spm-model",
                str(bible / "spm" / "joint.model"),
                "--words",
                "--out",
                str(png),
                *pair,
            ]
        )
        # 10 source and 10 target words, + EOS each: 0.28 in a word + margins, 100 dpi
        image = assert_png(png, round(100 * (0.28 * 11 + 2.0)), round(100 * (0.28 * 11 + 1.5)))
        rgb = image[..., :3]
        reds[model] = ((rgb[..., 0] > 0.8) & (rgb[..., 1] < 0.3) & (rgb[..., 2] < 0.3)).sum()
    assert reds["local-p"] > 50 and reds["rnnsearch"] == 0
    with pytest.raises(SystemExit):
        heatmap(
            [
                "--path",
                str(tiny["local-p"]),
                "--data",
                str(bible / "bin"),
                "--gen-subset",
                "test",
                "--id",
                "99",
                "--out",
                str(tmp_path / "x.png"),
            ]
        )


@pytest.mark.slow
def test_learning_curves_from_a_real_training_log(tiny, tmp_path, capsys):
    png = tmp_path / "curves.png"
    curves.main([f"{m}={tiny[m].parent / 'train.log'}" for m in MODELS] + ["--png", str(png)])
    out = capsys.readouterr().out
    assert "| local-p | 15 |" in out and "| rnnsearch | 5 |" in out
    assert_png(png, 640, 420)


@pytest.mark.slow
def test_replace_unk_with_the_learned_dictionary(bible, word_level, tmp_path):
    """A word-level model with 150 words writes <unk>; luong-unk-dict learns a
    dictionary from its forced alignments of the training data, and
    fairseq-generate --replace-unk DICT puts DICT[aligned source word] (or the
    word itself when it has no entry) in place of every <unk>."""
    from luong_plugin.analysis.unk_dict import main as unk_dict

    train(
        word_level / "bin",
        tmp_path,
        "--attention-window",
        "global",
        "--dataset-impl",
        "raw",
        updates=10,
    )
    checkpoint, dictionary = tmp_path / "checkpoint_last.pt", tmp_path / "unk.dict"
    for lang in ("es", "en"):  # the first 500 training pairs are enough here
        lines = (bible / "raw" / f"train.{lang}").read_text().splitlines()[:500]
        (tmp_path / f"train.{lang}").write_text("\n".join(lines) + "\n")
    unk_dict(
        [
            "--path",
            str(checkpoint),
            "--data",
            str(word_level / "bin"),
            "--source",
            str(tmp_path / "train.es"),
            "--target",
            str(tmp_path / "train.en"),
            "--out",
            str(dictionary),
        ]
    )
    entries = dict(line.split() for line in dictionary.read_text().splitlines())
    vocabulary = {line.split()[0] for line in (word_level / "bin" / "dict.es.txt").open()}
    assert sum(word not in vocabulary for word in entries) > 100  # raw words, not <unk>

    args = [
        "fairseq-generate",
        *generate_args(
            word_level / "bin",
            checkpoint,
            "--print-alignment",
            "--dataset-impl",
            "raw",
            max_len_b=10,
        ),
    ]
    plain_out = fairseq(*args)
    replaced_out = fairseq(*args, "--replace-unk", dictionary)
    plain, replaced = parse(plain_out, "H"), parse(replaced_out, "H")
    # with --replace-unk, S- is the original text (without, the <unk>-ed tokens)
    sources, links = parse(replaced_out, "S"), parse(plain_out, "A")
    assert links == parse(replaced_out, "A")
    from_dictionary = 0
    for i in plain:
        source = sources[i].split() + ["<eos>"]
        aligned = {int(j): int(s) for s, j in (link.split("-") for link in links[i].split())}
        for t, (word, new) in enumerate(zip(plain[i].split(), replaced[i].split())):
            if word == "<unk>":
                src_word = source[aligned.get(t, -1)]
                assert new == entries.get(src_word, src_word)
                from_dictionary += src_word in entries and entries[src_word] != src_word
            else:
                assert new == word
    assert from_dictionary > 0
