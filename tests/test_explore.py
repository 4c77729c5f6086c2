"""luong-explore on tiny real-text models: our maps and fairseq lstm's as
fairseq-generate prints them, forced decoding with gold links, errors naming the
option, and the page itself in a real browser (Debian's chromium driven by
playwright). The embedded data unit by unit: test_explore_records.py."""

import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import generate, parse, train

from luong_plugin.analysis import explore
from luong_plugin.analysis.explore import decode_map

STEP = 0.5 / explore.LEVELS  # the largest rounding error of a stored weight


# ---- on tiny real-text models ------------------------------------------------


@pytest.fixture(scope="module")
def tiny(bible, tmp_path_factory):
    """A local-p luong, fairseq's lstm, and their beam output on 29 test verses."""
    root = tmp_path_factory.mktemp("explore")
    runs = {
        "local-p": ("luong_tiny", ["--attention-window", "local-p"], 15),
        "lstm": (
            "lstm",
            [
                "--encoder-embed-dim",
                "16",
                "--encoder-hidden-size",
                "16",
                "--decoder-embed-dim",
                "16",
                "--decoder-hidden-size",
                "16",
                "--decoder-out-embed-dim",
                "16",
            ],
            8,
        ),
    }
    paths = {}
    for name, (arch, options, updates) in runs.items():
        train(bible / "bin", root / name, *options, arch=arch, updates=updates)
        checkpoint = root / name / "checkpoint_last.pt"
        out = generate(
            bible / "bin",
            checkpoint,
            "--print-alignment",
            "soft",
            beam=3,
            batch_size=8,
            max_len_b=14,
        )
        (root / name / "test.gen.txt").write_text(out)
        paths[name] = checkpoint
    return paths


def explore_data(*argv):
    args = explore_parser_args(argv)
    return explore.build(args)


def explore_parser_args(argv):
    """The parsed command line of luong-explore (without writing a page)."""
    import argparse

    captured = {}

    def fake_build(args):
        captured["args"] = args
        raise SystemExit(0)

    real = explore.build
    explore.build = fake_build
    try:
        with pytest.raises(SystemExit):
            explore.main([*map(str, argv), "--out", os.devnull])
    finally:
        explore.build = real
    assert isinstance(captured["args"], argparse.Namespace)
    return captured["args"]


def printed_maps(gen_output):
    text = gen_output.read_text()
    soft = parse(text, "A")
    return {i: np.array([[float(p) for p in r.split(",")] for r in soft[i].split()]) for i in soft}


@pytest.mark.slow
def test_fairseq_lstm_maps_read_right(bible, tiny):
    """fairseq's lstm: forced decoding (the moved right-padded layout) is the same
    alone and in batches; fairseq-generate's printed rows, read with
    --fairseq-lstm, equal it where the batch padded the sentence by at most one
    column, and read as printed they do not (so the order is the lstm's)."""
    gen = tiny["lstm"].parent / "test.gen.txt"
    data = explore_data(f"lstm={gen}", "--fairseq-lstm", "lstm")
    exact = explore_data(f"lstm={gen}", "--path", f"lstm={tiny['lstm']}", "--data", bible / "bin")
    plain = explore_data(f"lstm={gen}")
    printed = printed_maps(gen)
    shifted = mismatched_as_printed = 0
    for rec, ex, pl in zip(data["sentences"], exact["sentences"], plain["sentences"]):
        n_src = len(rec["src"]) + 1
        exact_map = decode_map(ex["out"][0]["P"], n_src)
        read = decode_map(rec["out"][0]["P"], n_src)
        known = ~np.isnan(read)
        np.testing.assert_allclose(read[known], exact_map[known], atol=2 * STEP)
        shifted += not known.all() or not np.allclose(read, printed[rec["id"]], atol=STEP)
        as_printed = decode_map(pl["out"][0]["P"], n_src)
        mismatched_as_printed += np.abs(as_printed - exact_map).max() > 2 * STEP + 1e-9
    assert shifted > 0 and mismatched_as_printed > 0
    # batched forced decoding == alone
    one = explore_data(
        f"lstm={gen}",
        "--path",
        f"lstm={tiny['lstm']}",
        "--data",
        bible / "bin",
        "--batch-size",
        "1",
    )
    assert [s["out"][0]["P"] for s in one["sentences"]] == [
        s["out"][0]["P"] for s in exact["sentences"]
    ]


@pytest.mark.slow
def test_generate_outputs_with_checkpoint_add_p_t(bible, tiny):
    gen = tiny["local-p"].parent / "test.gen.txt"
    printed = printed_maps(gen)
    data = explore_data(
        f"local-p={gen}",
        f"lstm={tiny['lstm'].parent / 'test.gen.txt'}",
        "--fairseq-lstm",
        "lstm",
        "--path",
        f"local-p={tiny['local-p']}",
        "--data",
        bible / "bin",
        "--reference",
        bible / "raw" / "test.en",
    )
    assert [m["window"] for m in data["models"]] == [3, None]
    references = (bible / "raw" / "test.en").read_text().splitlines()
    from sacrebleu.metrics import BLEU

    for rec in data["sentences"]:
        ours, lstm = rec["out"]
        assert "pt" in ours and "pt" not in lstm
        n_src = len(rec["src"]) + 1
        np.testing.assert_allclose(
            decode_map(ours["P"], n_src), printed[rec["id"]], atol=STEP + 1e-5
        )
        assert rec["ref"] == references[rec["id"]]
        bleu = BLEU(effective_order=True).sentence_score(ours["text"], [rec["ref"]]).score
        assert ours["bleu"] == round(bleu, 2)


def test_bad_input_names_the_option(tmp_path, capsys):
    gen = tmp_path / "a" / "test.gen.txt"
    gen.parent.mkdir()
    gen.write_text("S-0\t▁a ▁b\nH-0\t-0.5\t▁x\nA-0\t0.5,0.4,0.1 0.2,0.2,0.6\n")
    post = tmp_path / "post.txt"
    post.write_text("S-0\ta b\nH-0\t-0.5\tx y\nA-0\t0.5,0.4,0.1 0.2,0.2,0.6\n")
    cases = [
        ([str(gen), "--fairseq-lstm", "b"], "--fairseq-lstm b: expected one of the generate"),
        ([str(gen), "--gold", str(gen)], "--gold needs forced decoding"),
        ([str(gen), f"other={post}"], r"expected \(3, 3\).*without --post-process"),
        ([f"x={gen}", f"x={gen}"], "two models named the same"),
        ([str(gen), "--subword", "wordpiece"], "invalid choice: 'wordpiece'"),
        ([], "give generate outputs"),
        (["--path", "m=x.pt"], "--path needs --data"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit):
            explore.main([*argv, "--out", str(tmp_path / "x.html")])
        assert re.search(message, capsys.readouterr().err), message


# ---- the page in a real browser ---------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def browser():
    """A headless Debian chromium through playwright, or a skip saying why not."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (make sword installs Debian's chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (requirements.txt)")
    manager = sync_playwright().start()
    try:
        return manager, manager.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
    except Exception as e:  # a chromium that cannot start here (no sandbox support, libraries)
        manager.stop()
        pytest.skip(f"chromium does not start: {str(e).splitlines()[0]}")


@pytest.mark.slow
def test_page_in_a_real_browser(bible, tiny, tmp_path):
    page_path = tmp_path / "explore.html"
    gen = {m: tiny[m].parent / "test.gen.txt" for m in tiny}
    explore.main(
        [
            f"local-p={gen['local-p']}",
            "--path",
            f"local-p={tiny['local-p']}",
            f"lstm={gen['lstm']}",
            "--fairseq-lstm",
            "lstm",
            "--data",
            str(bible / "bin"),
            "--reference",
            str(bible / "raw" / "test.en"),
            "--out",
            str(page_path),
        ]
    )
    html = page_path.read_text()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)  # nothing from the network
    data = json.loads(
        re.search(r'<script type="application/json" id="data">(.*?)</script>', html, re.S)
        .group(1)
        .replace("<\\/", "</")
    )
    sentences = data["sentences"]
    assert len(sentences) == 29

    manager, chromium = browser()
    try:
        page = chromium.new_page(viewport={"width": 1300, "height": 900})
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        page.wait_for_selector("body[data-ready]")
        rows = page.locator("#sentences tbody tr")
        assert rows.count() == 29
        assert page.inner_text("#count") == "29 of 29 sentences"

        # sort by length, longest first
        page.select_option("#sort", "length")
        page.select_option("#dir", "desc")
        lengths = [
            int(x) for x in page.locator("#sentences tbody tr td:nth-child(2)").all_inner_texts()
        ]
        assert lengths == sorted((len(s["srcW"]) for s in sentences), reverse=True)
        # sort by the difference of the two models' BLEU
        page.select_option("#sort", "BLEU local-p − lstm")
        ids = [
            int(x) for x in page.locator("#sentences tbody tr td:nth-child(1)").all_inner_texts()
        ]
        diff = {s["id"]: s["out"][0]["bleu"] - s["out"][1]["bleu"] for s in sentences}
        assert [diff[i] for i in ids] == sorted(diff.values(), reverse=True)

        # filter by a word of some but not all verses
        word = "Jehová"
        expected = [s for s in sentences if word.lower() in " ".join(s["srcW"]).lower()]
        assert 0 < len(expected) < 29
        page.fill("#filter", word)
        assert rows.count() == len(expected)
        assert page.inner_text("#count") == f"{len(expected)} of 29 sentences"
        page.fill("#filter", "")
        assert rows.count() == 29

        # open a sentence; hover each target word of our model: the marked source
        # cell is the argmax of that row of the exact forced-decoding map
        record = max(sentences, key=lambda s: len(s["srcW"]))
        page.locator(f"#sentences tbody tr[data-k='{sentences.index(record)}']").click()
        ours = page.locator("svg.matrix[data-model='local-p']")
        out = record["out"][0]
        n_src_words = len(record["srcW"]) + 1
        assert ours.locator("text.sl").count() == n_src_words
        word_map = decode_map(out["W"], n_src_words)
        checked = 0
        for j in range(len(out["tgtW"])):
            ours.locator(f"text.tl[data-r='{j}']").hover()
            best = ours.locator("rect.cell.best")
            cells = [
                (int(best.nth(k).get_attribute("data-r")), int(best.nth(k).get_attribute("data-c")))
                for k in range(best.count())
            ]
            assert (
                cells == [(j, int(np.argmax(word_map[j, :-1])))]
                or np.sort(word_map[j, :-1])[-2:].ptp() < 2 * STEP
            )  # a tie the rounding made
            assert cells == [(j, out["linkW"][j])]
            marked = ours.locator("text.sl.best")
            assert int(marked.get_attribute("data-c")) == out["linkW"][j]
            checked += 1
        assert checked == len(out["tgtW"]) > 0
        assert ours.locator("circle.pt").count() == len(out["tgtW"]) + 1
        assert ours.locator("rect.win").count() > 0
        assert page.locator("svg.matrix[data-model='lstm'] circle.pt").count() == 0

        # pieces instead of words
        page.check("input[name=unit][value=pieces]")
        ours = page.locator("svg.matrix[data-model='local-p']")
        assert ours.locator("text.sl").count() == len(record["src"]) + 1
        assert ours.locator("text.tl").count() == len(out["tgt"]) + 1
        ours.locator("text.tl[data-r='0']").hover()
        assert int(ours.locator("rect.cell.best").get_attribute("data-c")) == out["linkP"][0]

        png = tmp_path / "page.png"
        page.screenshot(path=str(png), full_page=True)
        assert not errors, errors
    finally:
        chromium.close()
        manager.stop()
    from conftest import assert_png

    image = assert_png(png)
    colours = np.unique((image[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50  # text, weights, windows: not a blank or one-colour page


@pytest.mark.slow
def test_forced_decoding_of_references_with_gold_links_and_aer(bible, tiny, tmp_path):
    """--path alone force-decodes --source/--target (raw text with --spm-model), as
    luong-align does; --gold adds each sentence's sure/possible links and its AER."""
    from luong_plugin.analysis import aer
    from luong_plugin.analysis.align import main as align

    raw = bible / "raw"
    n = len((raw / "test.es").read_text().splitlines())
    gold = tmp_path / "gold.talp"  # 1-based: word k with word k sure, k with k+1 possible
    gold.write_text("".join("1-1 2-2 3-3 2p3\n" for _ in range(n)))
    common = [
        "--data",
        bible / "bin",
        "--source",
        raw / "test.es",
        "--target",
        raw / "test.en",
        "--spm-model",
        bible / "spm" / "joint.model",
    ]
    data = explore_data("--path", f"local-p={tiny['local-p']}", *common, "--gold", gold)
    assert data["gold"] and len(data["sentences"]) == n
    align(["--path", str(tiny["local-p"]), *map(str, common), "--out", str(tmp_path / "align")])
    hard = aer.read_pharaoh(str(tmp_path / "align"))
    gold_links = aer.read_gold(str(gold))
    references = (raw / "test.en").read_text().splitlines()
    for rec, (links, _), g in zip(data["sentences"], hard, gold_links):
        out = rec["out"][0]
        assert {(i, j) for j, i in enumerate(out["linkW"])} == links  # luong-align's links
        assert out["aer"] == round(aer.score([links], [g])["aer"], 4)
        assert rec["gold"] == {"sure": [[0, 0], [1, 1], [2, 2]], "possible": [[1, 2]]}
        assert "pt" in out and "bleu" not in out
        assert " ".join(out["tgtW"]) == " ".join(references[rec["id"]].split())
