"""experiments/length_penalty.py: the choice on the valid split, the page, the options it
refuses, and one run end to end on a tiny checkpoint of the Bible slice."""

import json
import os

import pytest
import torch
from conftest import build, generate, parse, train

from experiments import corpus_budget, length_penalty
from luong_plugin.analysis.generate_output import decode_pieces
from luong_plugin.analysis.report import score


def scores(bleu, ratio=1.0):
    return {"bleu": bleu, "chrf": 50.0, "length_ratio": ratio, "brevity_penalty": 1.0,
            "bleu_precisions": [60.0, 40.0, 30.0, 20.0]}  # fmt: skip


def test_the_highest_valid_bleu_is_chosen_and_a_tie_goes_to_the_value_nearest_1():
    assert length_penalty.choose({"0.6": scores(20), "1.0": scores(21), "1.4": scores(22)}) == 1.4
    assert length_penalty.choose({"0.6": scores(22), "1.0": scores(21), "1.8": scores(22)}) == 0.6
    assert length_penalty.choose({"1.0": scores(22), "1.4": scores(22)}) == 1.0
    assert length_penalty.choose({"0.6": scores(22), "1.4": scores(22)}) == 0.6  # equally far


TINY_LSTM = dict(encoder_embed_dim=16, encoder_hidden_size=16, decoder_embed_dim=16,
                 decoder_hidden_size=16, decoder_out_embed_dim=16,
                 criterion="cross_entropy")  # fmt: skip


@pytest.mark.parametrize(
    "arch,options", [("luong_tiny", {"attention_window": "local-p"}), ("lstm", TINY_LSTM)]
)
def test_the_forced_eos_profile_is_the_probability_of_eos_step_by_step(arch, options, monkeypatch):
    """Against a direct reading: each sentence alone, each prefix of its reference run
    through the model whole, the probability of </s>, the attention's mean position and
    local-p's p_t at the prefix's last step. fairseq's lstm needs its batch sorted by
    source length. The source's end is moved into the widest gap between the positions an
    untrained model reads (and again between its p_t), so that some steps reach it and
    others do not."""
    from luong_plugin.analysis.forced import Pair

    model = build(arch, **options).eval()  # fairseq's lstm returns its maps in eval mode
    task = type("Task", (), {"source_dictionary": model.encoder.dictionary,
                             "target_dictionary": model.decoder.dictionary})()  # fmt: skip
    eos = task.target_dictionary.eos()
    generator = torch.Generator().manual_seed(0)
    pairs = []
    for src_len, tgt_len in [(5, 3), (9, 6), (2, 4), (3, 9), (1, 3)]:
        src = torch.randint(4, 20, (src_len,), generator=generator).tolist() + [eos]
        tgt = torch.randint(4, 23, (tgt_len,), generator=generator).tolist() + [eos]
        pairs.append(Pair([], [], torch.tensor(src), torch.tensor(tgt)))
    early, end, steps, behind = [], [], [], []  # steps: (P(</s>), position, p_t, last)
    with torch.no_grad():
        for pair in pairs:
            src, tgt = pair.src_tokens[None], pair.tgt_tokens
            prev = torch.cat([tgt.new_tensor([eos]), tgt[:-1]])[None]  # </s> + reference
            p_eos = []
            for t in range(len(tgt)):
                logits, extra = model(src, torch.tensor([src.size(1)]), prev[:, : t + 1])
                p_eos.append(torch.softmax(logits[0, -1].double(), -1)[eos].item())
                attn = extra if arch == "lstm" else extra["attn"][0]  # 1 x T x S
                row = attn[0, -1].double()  # S: pieces, then </s>
                position = sum(s * w for s, w in enumerate(row.tolist())) / row.sum().item()
                p_t = None if arch == "lstm" else extra["p_t"][0][0, -1].item()
                if t < len(tgt) - 1:  # a step before the reference's </s>
                    pieces = src.size(1) - 1
                    steps.append((p_eos[-1], position, p_t, pieces - 1))
                    if p_t is not None:
                        behind.append(position - p_t)
            early.append(sum(p_eos[:-1]))
            end.append(torch.tensor(p_eos[-1]).log().item())
    for by in (1, 2) if arch == "luong_tiny" else (1,):  # the attention's position, p_t
        # the source's end in the widest gap between the middle half of the steps' values
        read = sorted(step[by] / step[3] for step in steps if step[3] > 0)
        middle = read[len(read) // 4 : 3 * len(read) // 4 + 1]
        gap, below = max((b - a, a) for a, b in zip(middle, middle[1:]))
        monkeypatch.setattr(length_penalty, "SOURCE_END", below + gap / 2)
        profile = length_penalty.eos_profile(model, task, pairs, batch_size=2)
        at_end = [(step[0], step[by] >= step[3] * length_penalty.SOURCE_END) for step in steps]
        assert 0 < sum(at for _, at in at_end) < len(at_end)  # both kinds of step occur
        infix = "" if by == 1 else "_p_t"
        assert profile[f"premature_eos{infix}_at_source_end"] == pytest.approx(
            sum(p for p, at in at_end if at) / 5, abs=1e-4
        )
        assert profile[f"early_steps{infix}_at_source_end"] == pytest.approx(
            sum(at for _, at in at_end) / len(steps), abs=1e-4
        )
    assert profile["sentences"] == 5
    assert profile["premature_eos"] == pytest.approx(sum(early) / 5, abs=1e-4)
    assert profile["end_eos_log_prob"] == pytest.approx(sum(end) / 5, abs=1e-4)
    if arch == "lstm":
        assert profile["premature_eos_p_t_at_source_end"] is None
        assert profile["p_t_behind_attention"] is None
    else:
        assert profile["p_t_behind_attention"] == pytest.approx(sum(behind) / len(behind), abs=1e-3)


def test_one_forward_pass_gives_each_sentence_its_own_logits_and_map_in_any_order():
    """forced.forward_with_attention on a batch of fairseq's lstm whose sources are not
    sorted by length (it sorts them to pack, and must put its logits and maps back) against
    each sentence alone; the maps in the batch's left-padded layout."""
    from fairseq.data import data_utils

    from luong_plugin.analysis import forced

    model = build("lstm", **TINY_LSTM).eval()
    pad, eos = model.encoder.dictionary.pad(), model.encoder.dictionary.eos()
    generator = torch.Generator().manual_seed(1)
    sources = [torch.randint(4, 20, (n,), generator=generator).tolist() + [eos] for n in (2, 7, 4)]
    targets = [torch.randint(4, 20, (5,), generator=generator).tolist() + [eos] for _ in sources]
    src_tokens = data_utils.collate_tokens(
        [torch.tensor(x) for x in sources], pad, eos, left_pad=True
    )
    prev = data_utils.collate_tokens([torch.tensor(y) for y in targets], pad, eos,
                                     move_eos_to_beginning=True)  # fmt: skip
    lengths = torch.tensor([len(x) for x in sources])
    with torch.no_grad():
        logits, attn, p_t = forced.forward_with_attention(model, src_tokens, lengths, prev, pad)
        assert p_t is None
        for b, source in enumerate(sources):
            alone, alone_attn = model(torch.tensor([source]), lengths[b : b + 1], prev[b : b + 1])
            torch.testing.assert_close(logits[b], alone[0], atol=1e-5, rtol=0)
            real = src_tokens[b].ne(pad)
            torch.testing.assert_close(attn[b][:, real], alone_attn[0].float(), atol=1e-5, rtol=0)


def result(name, seed, chosen, test_bleu, corpus="bible_es_en"):
    valid = {str(v): scores(20.0 + (v == chosen), 0.9 + v / 10) for v in (0.6, 1.0, 1.4)}
    return {
        "name": name, "corpus": corpus, "seed": seed, "lenpens": [0.6, 1.0, 1.4],
        "budget_json": "docs/experiments/sitting/bible_es_en/x.json", "checkpoint_update": 9,
        "budget_sitting": "2026-11-29 05:19", "valid": valid, "valid_greedy": scores(18.0, 0.97),
        "valid_forced": {
            "premature_eos": 0.1 * seed, "end_eos_log_prob": -0.2, "sentences": 60,
            "premature_eos_at_source_end": 0.03 * seed, "early_steps_at_source_end": 0.1,
            "premature_eos_p_t_at_source_end": None if name == "global" else 0.05,
            "early_steps_p_t_at_source_end": None if name == "global" else 0.12,
            "p_t_behind_attention": None if name == "global" else 1.5 * seed,
        },
        "chosen_lenpen": chosen, "test": {"1.0": scores(25.0), str(chosen): scores(test_bleu)},
        "started": "2026-11-29 09:00", "commit": "abc1234", "machine": "Intel Xeon, 2 cores",
    }  # fmt: skip


def save(root, r):
    path = root / r["corpus"] / f"{r['name']}.seed{r['seed']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(r))


def test_the_page_shows_each_runs_choice_and_scores(tmp_path):
    save(tmp_path, result("local-p", 1, 1.4, 26.0))
    save(tmp_path, result("local-p", 2, 1.0, 25.0))
    page = tmp_path / "PAGE.md"
    length_penalty.render(str(page), str(tmp_path))
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `local-p` |"))
    cells = row.split(" | ")
    assert cells[1] == "20.50 (20.00 / 21.00)"  # valid at 1: seed 2 chose 1
    assert cells[4] == "0.150 (0.100 / 0.200)"  # premature </s> mass
    assert cells[5] == "1.4 / 1"  # the choices, not their mean
    assert cells[7:9] == ["25.00 (25.00 / 25.00)", "25.50 (26.00 / 25.00)"]
    assert "| `local-p` | 20.00 / 20.00 | 20.00 / 21.00 | 21.00 / 20.00 |" in text
    # where the attention stands: 0.1 - 0.03 and 0.2 - 0.06 before the source's end
    assert (
        "| `local-p` | 0.105 (0.070 / 0.140) | 0.045 (0.030 / 0.060) | 0.100 (0.100 / 0.100)"
        " | 0.050 (0.050 / 0.050) | 0.120 (0.120 / 0.120) | 2.25 (1.50 / 3.00) |"
    ) in text
    assert "`docs_en_fr_long`" not in text
    assert "JSONs written: 2026-11-29, commit abc1234, Intel Xeon, 2 cores." in text
    older = result("global", 1, 1.0, 25.0)
    del older["valid_forced"]  # written before it was measured
    save(tmp_path, older)
    length_penalty.render(str(page), str(tmp_path))
    row = next(line for line in page.read_text().splitlines() if line.startswith("| `global` |"))
    assert row.split(" | ")[4] == "–"
    assert page.read_text().count("| `global` |") == 2  # no row where nothing stands
    save(tmp_path, result("global", 2, 1.0, 25.0))  # global attention has no p_t
    length_penalty.render(str(page), str(tmp_path))
    assert ("| `global` | 0.140 (seed 2) | 0.060 (seed 2) | 0.100 (seed 2) | – | – | – |"
            in page.read_text())  # fmt: skip


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--lenpens", "0.6", "1.4"], "--lenpens must include 1"),
        (["--lenpens", "1", "-1"], "--lenpens must be >= 0"),
        (["--lenpens", "1", "1"], "--lenpens 1.0 1.0: each once"),
        (["--jobs", "0"], "--jobs must be >= 1"),
    ],
)
def test_bad_options_are_refused_naming_the_option(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        length_penalty.parse_args(["--budget-results", str(tmp_path), "--render-only", *argv])
    assert message in capsys.readouterr().err


def test_a_sitting_without_the_runs_asked_for_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        length_penalty.parse_args(["--budget-results", str(tmp_path), "--runs", "global"])
    assert f"--budget-results {tmp_path}: no " in capsys.readouterr().err


def test_a_json_without_the_forced_reading_or_where_attention_stands_is_not_done(tmp_path):
    r = result("global", 1, 1.0, 25.0)
    path = tmp_path / "global.seed1.json"
    path.write_text(json.dumps(r))
    assert length_penalty.done(str(path), r["budget_json"], r["lenpens"])
    assert not length_penalty.done(str(path), r["budget_json"], [1.0])
    del r["valid_forced"]["early_steps_at_source_end"]  # before where the attention stands
    path.write_text(json.dumps(r))
    assert not length_penalty.done(str(path), r["budget_json"], r["lenpens"])
    del r["valid_forced"]
    path.write_text(json.dumps(r))
    assert not length_penalty.done(str(path), r["budget_json"], r["lenpens"])


def test_a_decoding_is_reused_only_whole_and_newer_than_the_checkpoint(tmp_path):
    checkpoint, out = tmp_path / "checkpoint_best.pt", tmp_path / "valid.txt"
    checkpoint.write_text("")
    out.write_text("H-0\t-1\tx\n")
    log = tmp_path / "valid.txt.log"
    log.write_text("INFO:fairseq_cli.generate:NOTE: hypothesis and token scores are output\n")
    assert not length_penalty.finished(str(out), str(checkpoint))  # killed before the end
    log.write_text("INFO:fairseq_cli.generate:Translated 1 sentences (2 tokens) in 0.1s\n")
    assert length_penalty.finished(str(out), str(checkpoint))
    os.utime(out, (1, 1))  # decoded before this checkpoint was saved
    assert not length_penalty.finished(str(out), str(checkpoint))


@pytest.mark.slow
def test_a_run_end_to_end_on_a_tiny_checkpoint(bible, tmp_path, monkeypatch):
    """A sitting's run made by hand: a tiny model, its test split decoded and scored at
    --lenpen 1 here, through conftest's generate; the study must repeat that score. One
    length penalty, to keep it short: the choice among several is the test above."""
    monkeypatch.setitem(corpus_budget.CORPORA, "bible_es_en", ("prepare", str(bible), "es", "en"))
    monkeypatch.setattr(corpus_budget, "RUN_DIRS", str(tmp_path / "runs"))
    # an 8-update model seldom ends a sentence: cap its length, here and in the study
    monkeypatch.setattr(length_penalty, "DECODE", [*length_penalty.DECODE, "--max-len-b", "20"])
    run_dir = tmp_path / "runs" / "bible_es_en" / "global.seed1"
    train(bible / "bin", run_dir, updates=8)
    checkpoint = run_dir / "checkpoint_best.pt"
    rows = parse(
        generate(bible / "bin", checkpoint, "--lenpen", "1", batch_size=64, max_len_b=20), "H"
    )
    references = (bible / "raw" / "test.en").read_text().splitlines()
    (bleu, _), _ = score([decode_pieces(rows[i]) for i in range(len(references))], references)
    budget = tmp_path / "sitting" / "bible_es_en" / "global.seed1.json"
    budget.parent.mkdir(parents=True)
    sitting = {"bleu": round(bleu.score, 2), "best_checkpoint": {"update": 8},
               "started": "2026-11-29 05:19"}  # fmt: skip
    budget.write_text(json.dumps(sitting))
    argv = ["--budget-results", str(tmp_path / "sitting"), "--corpora", "bible_es_en",
            "--runs", "global", "--seeds", "1", "--lenpens", "1", "--jobs", "1",
            "--results", str(tmp_path / "results"), "--out", str(tmp_path / "PAGE.md")]  # fmt: skip
    length_penalty.main(argv)
    r = json.loads((tmp_path / "results" / "bible_es_en" / "global.seed1.json").read_text())
    assert list(r["valid"]) == ["1.0"] and r["checkpoint_update"] == 8
    assert r["test"]["1.0"]["bleu"] == sitting["bleu"]  # the sitting's score, repeated
    assert r["chosen_lenpen"] == 1.0
    assert r["valid_greedy"]["length_ratio"] > 0
    assert r["valid_forced"]["sentences"] == 60 and r["valid_forced"]["premature_eos"] > 0
    assert "| `global` |" in (tmp_path / "PAGE.md").read_text()

    decodings = sorted((run_dir / "length_penalty").glob("*.txt"))
    written = [d.stat().st_mtime_ns for d in decodings]
    length_penalty.main([*argv, "--results", str(tmp_path / "again")])  # each decoding reused
    assert [d.stat().st_mtime_ns for d in decodings] == written
    again = json.loads((tmp_path / "again" / "bible_es_en" / "global.seed1.json").read_text())
    assert again["valid"] == r["valid"] and again["test"] == r["test"]

    sitting["bleu"] += 0.01  # a sitting that scored otherwise: stopped, nothing written
    budget.write_text(json.dumps(sitting))
    with pytest.raises(RuntimeError, match=r"test at --lenpen 1 scores .*, .* \d"):
        length_penalty.main([*argv, "--results", str(tmp_path / "other")])
    assert not (tmp_path / "other" / "bible_es_en" / "global.seed1.json").exists()

    sitting["best_checkpoint"]["update"] = 6  # another run's JSON
    budget.write_text(json.dumps(sitting))
    with pytest.raises(RuntimeError, match="saved at update 8, .* decoded update 6"):
        length_penalty.main([*argv, "--results", str(tmp_path / "refused")])
