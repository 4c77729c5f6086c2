"""The WMT recipes (recipes/wmt*/run.sh, luong_plugin/corpora/wmt*.py): SGML reading
against sacrebleu's reader, tokenized BLEU against a loop-based multi-bleu.perl,
vocabulary and length filter, offline fetching, and every recipe end to end on a
stand-in raw directory: prepare -> train 1 update -> evaluate. The train command line
against the papers' learning-rate schedules: test_wmt_train_command.py."""

import collections
import io
import json
import math
import os
import random
import subprocess
import tarfile

import pytest
from conftest import REPO, VENV_BIN

from luong_plugin.corpora import wmt, wmt_run, wmt_standin

PYTHON = os.path.join(VENV_BIN, "python")


# ------------------------------------------------------------------------------ SGML

SGML = """<refset setid="newstest2014" srclang="any" trglang="de">
<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">
<p>
<seg id="1">Gutach:  Noch mehr Sicherheit für Fußgänger</seg>
<seg id="2"> Sie stehen keine 100 Meter voneinander entfernt &amp; "mehr" </seg>
</p>
</doc>
<doc sysid="ref" docid="1018-lr" genre="news" origlang="de">
<seg id="1">Ein zweites Dokument.</seg>
</doc>
</refset>
"""


def sacrebleu_reads(path, tmp_path):
    """sacrebleu's own reader of WMT's SGML files (an independent implementation)."""
    from sacrebleu.dataset.fake_sgml import FakeSGMLDataset

    out = tmp_path / "sacrebleu.txt"
    FakeSGMLDataset._convert_format(FakeSGMLDataset.__new__(FakeSGMLDataset), str(path), str(out))
    return out.read_text(encoding="utf-8").splitlines()


def test_read_sgm_reads_what_sacrebleu_reads(tmp_path):
    path = tmp_path / "newstest2014-deen-ref.de.sgm"
    path.write_text(SGML, encoding="utf-8")
    segments = wmt.read_sgm(str(path))
    assert segments == sacrebleu_reads(path, tmp_path)
    assert segments == [
        "Gutach: Noch mehr Sicherheit für Fußgänger",
        'Sie stehen keine 100 Meter voneinander entfernt &amp; "mehr"',
        "Ein zweites Dokument.",
    ]


def test_standin_sgml_is_read_back_by_sacrebleu(tmp_path):
    lines = [f"Satz {i} & <mehr>" for i in range(23)]
    path = tmp_path / "t.sgm"
    path.write_text(wmt_standin.sgml(lines, "newstest2014", "de", "ref"), encoding="utf-8")
    assert sacrebleu_reads(path, tmp_path) == lines
    assert wmt.read_sgm(str(path)) == lines


def test_sgm_errors_name_the_file(tmp_path):
    path = tmp_path / "plain.sgm"
    path.write_text("no markup here\n")
    with pytest.raises(ValueError, match="plain.sgm: no <seg"):
        wmt.read_sgm(str(path))


def test_parallel_files_of_different_length_are_refused(tmp_path):
    recipe = wmt.RECIPES["wmt14_en_de"]
    for lang, n in (("en", 3), ("de", 2)):
        path = tmp_path / wmt.EUROPARL.path(lang, "en", "de", "de-en")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x\n" * n)
    with pytest.raises(ValueError, match="differ in length .line 3"):
        list(wmt.read_parallel(wmt.EUROPARL, recipe, str(tmp_path)))


# ---------------------------------------------------------------------- tokenized BLEU


def multi_bleu(hyps, refs):
    """multi-bleu.perl, written out: clipped n-gram counts summed over the corpus,
    BLEU = BP * exp(mean log p_n), 0 when some p_n is 0, BP = exp(1 - r/c) if c < r."""
    correct, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hyp, ref in zip(hyps, refs):
        h, r = hyp.split(), ref.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_ngrams = [tuple(h[i : i + n]) for i in range(len(h) - n + 1)]
            r_counts = {}
            for i in range(len(r) - n + 1):
                r_counts[tuple(r[i : i + n])] = r_counts.get(tuple(r[i : i + n]), 0) + 1
            seen = {}
            for g in h_ngrams:
                seen[g] = seen.get(g, 0) + 1
                if seen[g] <= r_counts.get(g, 0):
                    correct[n - 1] += 1
            total[n - 1] += len(h_ngrams)
    if min(correct) == 0:
        return 0.0
    log_p = sum(math.log(c / t) for c, t in zip(correct, total)) / 4
    bp = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_p)


@pytest.mark.parametrize("seed", range(4))
def test_tokenized_bleu_is_multi_bleu(seed):
    rng = random.Random(seed)
    words = "der die das Haus , . ist ein Mann @-@ Frau & und".split()
    refs, hyps = [], []
    for _ in range(40):
        ref = [rng.choice(words) for _ in range(rng.randint(3, 20))]
        hyp = [w for w in ref if rng.random() > 0.2] + [rng.choice(words)] * rng.randint(0, 2)
        if seed % 2:  # shorter hypotheses: brevity penalty
            hyp = hyp[: max(1, len(hyp) // 2)]
        refs.append(" ".join(ref))
        hyps.append(" ".join(hyp))
    score, signature = wmt_run.tokenized_bleu(hyps, refs)
    assert score.score == pytest.approx(multi_bleu(hyps, refs), abs=1e-9)
    assert "tok:none" in str(signature) and "smooth:none" in str(signature)


def test_tokenized_bleu_is_zero_without_a_4gram_match():
    hyps, refs = ["a b c d", "e f g"], ["a b c x", "e f y"]
    assert multi_bleu(hyps, refs) == 0.0
    assert wmt_run.tokenized_bleu(hyps, refs)[0].score == 0.0


# ----------------------------------------------------------------- vocabulary, filter


def test_top_words_most_frequent_first_ties_by_code_point_no_specials():
    counts = collections.Counter({"b": 5, "a": 5, "<unk>": 9, "c": 7, "</s>": 8, "d": 1, "Z": 5})
    assert wmt.top_words(counts, 4) == [("c", 7), ("Z", 5), ("a", 5), ("b", 5)]
    assert len(wmt.top_words(counts, 100)) == 5


@pytest.mark.parametrize(
    "lengths, kept", [((50, 50), True), ((51, 3), False), ((3, 51), False), ((0, 4), False)]
)
def test_keep_pair_drops_pairs_longer_than_50_words(lengths, kept):
    assert wmt.keep_pair(*lengths, 50) is kept


def test_tokenizer_is_moses_aggressive_without_escaping():
    from sacremoses import MosesTokenizer

    text = 'Das 5-mal "große"\u00ad Haus\u200b & <b>'
    expected = MosesTokenizer(lang="de").tokenize(
        'Das 5-mal "große" Haus & <b>',
        aggressive_dash_splits=True,
        escape=False,
        return_str=True,
    )
    assert wmt.tokenize(text, "de") == expected == 'Das 5 @-@ mal " große " Haus & < b >'
    pairs = [(f"a-b {i}.", f"c-d {i}!") for i in range(25)]
    assert list(wmt.tokenize_pairs(pairs, "en", "de", workers=2, chunk=4)) == list(
        wmt.tokenize_pairs(pairs, "en", "de", workers=1)
    )


# -------------------------------------------------------------------- raw files, fetch


@pytest.fixture
def offline(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the recipe tried to download")

    monkeypatch.setattr(wmt.urllib.request, "urlopen", refuse)


def test_raw_dir_with_missing_files_is_an_error_and_never_downloads(tmp_path, offline):
    with pytest.raises(FileNotFoundError) as error:
        wmt.prepare(wmt.RECIPES["wmt14_en_fr"], str(tmp_path / "out"), raw_dir=str(tmp_path))
    message = str(error.value)
    assert f"--raw-dir {tmp_path} lacks" in message
    assert "http://statmt.org/wmt10/training-giga-fren.tar: giga-fren.release2.fixed.en.gz" in (
        message
    )
    assert "https://statmt.org/wmt14/test-filtered.tgz: test/newstest2014-fren-src.en.sgm" in (
        message
    )


def test_fetch_extracts_only_the_recipes_files_from_downloaded_archives(tmp_path, offline):
    """Archives already in RAW/downloads are not fetched again; only the members the
    recipe reads are extracted."""
    recipe = wmt.RECIPES["wmt15_de_en"]
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    members = collections.defaultdict(list)
    for part, _, path in recipe.raw_files():
        members[part.archive].append(path)
    for archive, paths in members.items():
        with tarfile.open(downloads / archive, "w:gz") as tar:
            for name in ["./" + paths[0], *paths[1:], "training/unused.cs-en.cs"]:
                data = f"{name}\n".encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    wmt.fetch(recipe, str(tmp_path))
    for _, _, path in recipe.raw_files():
        assert (tmp_path / path).read_text().strip().removeprefix("./") == path
    assert not (tmp_path / "training" / "unused.cs-en.cs").exists()
    assert wmt.missing_files(recipe, str(tmp_path)) == {}


# ------------------------------------------------------------------------ end to end

TINY = {"wmt14_en_de": "luong_tiny", "wmt15_de_en": "luong_tiny", "wmt14_en_fr": "bahdanau_tiny"}


@pytest.fixture(scope="module")
def bible_lines():
    """English and Spanish lines of the real Bible corpus (Spanish stands in for German
    and French: the recipes only see files)."""
    from luong_plugin.corpora import bible

    if not bible.modules_present(bible.SWORD_DIR):
        pytest.skip(bible.missing_modules_message(bible.SWORD_DIR))
    pairs = bible.extract_pairs()[:2000:7][:210]
    return [en for _, _, en in pairs], [es for _, es, _ in pairs]


def run(recipe, *args):
    proc = subprocess.run(
        ["bash", f"recipes/{recipe}/run.sh", *map(str, args)], cwd=REPO, capture_output=True,
        text=True, env=dict(os.environ, OMP_NUM_THREADS="1", PYTHON=PYTHON),
    )  # fmt: skip
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout + proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("recipe_name", list(wmt.RECIPES))
def test_recipe_end_to_end_on_a_standin(recipe_name, bible_lines, tmp_path, offline):
    recipe = wmt.RECIPES[recipe_name]
    raw, data, ckpt = tmp_path / "raw", tmp_path / "data", tmp_path / "ckpt"
    wmt_standin.build(recipe, str(raw), *bible_lines)
    assert (raw / recipe.test.path(recipe.src, recipe.src, recipe.tgt, recipe.pair)).is_file()

    run(recipe_name, "prepare", "--raw-dir", raw, "--out", data, "--vocab", 200,
        "--workers", 1)  # fmt: skip
    stats = json.loads((data / "prepare.json").read_text())
    assert (stats["train_pairs"], stats["valid_pairs"], stats["test_pairs"]) == (150, 30, 30)
    # the filter, recomputed from the raw training files with sacremoses directly
    from sacremoses import MosesTokenizer

    src_tok, tgt_tok = MosesTokenizer(lang=recipe.src), MosesTokenizer(lang=recipe.tgt)
    expected = 0
    for part in recipe.train:
        for s, t in wmt.read_parallel(part, recipe, str(raw)):
            n_s = len(src_tok.tokenize(s, aggressive_dash_splits=True, escape=False))
            n_t = len(tgt_tok.tokenize(t, aggressive_dash_splits=True, escape=False))
            expected += 0 < n_s <= 50 and 0 < n_t <= 50
    assert 0 < stats["train_kept"] == expected < 150  # Bible verses reach 80+ words
    train_src = (data / "tok" / f"train.{recipe.src}").read_text().splitlines()
    assert len(train_src) == expected and max(len(s.split()) for s in train_src) <= 50
    for lang in (recipe.src, recipe.tgt):
        assert len((data / "vocab" / f"dict.{lang}.txt").read_text().splitlines()) == 200
    raw_ref = wmt.read_sgm(
        str(raw / recipe.test.path(recipe.tgt, *(recipe.src, recipe.tgt, recipe.pair)))
    )
    assert (data / "ref" / f"test.{recipe.tgt}").read_text().splitlines() == raw_ref

    log = run(recipe_name, "train", "--data", data, "--arch", TINY[recipe_name], "--save-dir",
              ckpt, "--", "--max-update", 1, "--num-workers", 0)  # fmt: skip
    assert "num_updates 1 |" in log and "done training" in log

    unk = ["--unk-replace"] if recipe_name == "wmt14_en_de" else []
    out = run(recipe_name, "evaluate", "--data", data, "--checkpoint", ckpt / "checkpoint_last.pt",
              "--beam", 2, *unk, "--", "--max-len-b", 8)  # fmt: skip
    assert "tokenized BLEU" in out and "tok:none|smooth:none" in out
    assert "sacreBLEU" in out and "tok:13a" in out and "on 30 test sentences" in out
    stem = "test.unk" if unk else "test"
    scores = json.loads((ckpt / f"{stem}.scores.json").read_text())
    hyps = (ckpt / f"{stem}.hyp.tok").read_text().splitlines()
    refs = (data / "tok" / f"test.{recipe.tgt}").read_text().splitlines()
    assert scores["sentences"] == len(hyps) == len(refs) == 30
    assert scores["tokenized_bleu"] == pytest.approx(multi_bleu(hyps, refs), abs=0.01)
    if unk:
        assert not any("<unk>" in h for h in hyps)
