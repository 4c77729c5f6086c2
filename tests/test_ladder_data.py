"""The ladder's word-level data (luong_plugin/corpora/bible_words.py) on a tiny synthetic
corpus whose word counts are known by construction: the 50-word filter, the top K words
(ties by code point), <unk> in the binarised test set, the test unk rates, and the
preparation skipped when up to date and redone when K changes."""

import os

import pytest
from fairseq.data import Dictionary, data_utils

from luong_plugin.corpora import bible_words

K = 7


def write(raw, split, pairs):
    for side, lang in enumerate(("es", "en")):
        with open(os.path.join(raw, f"{split}.{lang}"), "w", encoding="utf-8") as f:
            f.writelines(pair[side] + "\n" for pair in pairs)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Training counts per language: fifty 50 (one pair of exactly 50 words), a0/b0 10,
    a1 9, ..., a4 6, then y5 and z5 (y5e, z5e) 5 each: a tie at the K-th word. The
    pairs with 51 words on either side ("long") would outnumber every word if kept."""
    raw = tmp_path_factory.mktemp("raw")
    train = [(" ".join(["fifty"] * 50), " ".join(["fifty"] * 50))]
    for i, count in enumerate(range(10, 5, -1)):
        train += [(f"a{i}", f"b{i}")] * count
    train += [("y5", "y5e")] * 5 + [("z5", "z5e")] * 5
    train += [(" ".join(["long"] * 51), "b0"), ("a0", " ".join(["long"] * 51))]
    write(raw, "train", train)
    write(raw, "valid", [("a0 a1", "b0 b1")] * 3)
    # test: 8 Spanish tokens, 3 of them <unk> (z5, never, long); 8 English, 2 (z5e, never)
    write(
        raw, "test", [("a0 z5 never", "b0 z5e y5e"), ("a1 a2 y5 long fifty", "b1 never b2 b4 b3")]
    )
    out = tmp_path_factory.mktemp("words")
    stats = bible_words.prepare(str(raw), str(out), vocab=K, workers=1)
    return raw, out, stats


def test_pairs_over_50_words_are_dropped_and_50_kept(corpus):
    raw, out, stats = corpus
    assert (stats["train_pairs"], stats["train_kept"]) == (53, 51)
    lines = (out / "tok" / "train.es").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 51 and "long" not in " ".join(lines)
    assert max(len(line.split()) for line in lines) == 50


def test_top_k_words_most_frequent_first_ties_by_code_point(corpus):
    _, out, _ = corpus
    for lang, words in (("es", ["fifty", "a0", "a1", "a2", "a3", "a4", "y5"]),
                        ("en", ["fifty", "b0", "b1", "b2", "b3", "b4", "y5e"])):  # fmt: skip
        dictionary = (out / "vocab" / f"dict.{lang}.txt").read_text(encoding="utf-8")
        assert [line.split()[0] for line in dictionary.splitlines()] == words


def test_the_binarised_test_set_has_unk_for_every_other_word(corpus):
    _, out, _ = corpus
    expected = {"es": ["a0 <unk> <unk>", "a1 a2 y5 <unk> fifty"],
                "en": ["b0 <unk> y5e", "b1 <unk> b2 b4 b3"]}  # fmt: skip
    for lang in ("es", "en"):
        d = Dictionary.load(str(out / "bin" / f"dict.{lang}.txt"))
        data = data_utils.load_indexed_dataset(str(out / "bin" / f"test.es-en.{lang}"), d)
        assert [d.string(data[i]) for i in range(len(data))] == expected[lang]
        # the text copy --replace-unk reads keeps the words themselves
        raw_copy = (out / "bin-raw" / f"test.es-en.{lang}").read_text(encoding="utf-8")
        assert "<unk>" not in raw_copy and len(raw_copy.splitlines()) == 2


def test_test_unk_rates_counted_by_hand(corpus):
    raw, _, stats = corpus
    assert stats["test_unk_rate"] == {"es": round(3 / 8, 5), "en": round(2 / 8, 5)}
    (row,) = bible_words.unk_rates(str(raw), [K])
    assert (row["test_es"], row["test_en"], row["test_both"]) == (0.375, 0.25, 0.3125)
    assert (row["train_types_es"], row["train_types_en"]) == (8, 8)


def test_copyable_unks_count_source_unks_found_in_their_own_reference(corpus, tmp_path):
    _, out, _ = corpus  # z5, never, long: none in its own line's reference
    assert bible_words.copyable_unks(str(out)) == {"test_source_unk": 3, "in_reference": 0}
    for path, text in {"vocab/dict.es.txt": "dijo 5\nvino 3\n",
                       "tok/test.es": "Moisés dijo Faraón\nAarón vino\n",
                       "tok/test.en": "Moses said Faraón Aarón\nAaron came\n"}.items():  # fmt: skip
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_text(text, encoding="utf-8")
    # Faraón is in its reference; Aarón only in the other line's
    assert bible_words.copyable_unks(str(tmp_path)) == {"test_source_unk": 3, "in_reference": 1}


def test_prepare_is_skipped_when_up_to_date_and_redone_for_another_k(corpus, capsys):
    raw, out, _ = corpus
    stamp = os.path.getmtime(out / "prepare.json")
    bible_words.prepare(str(raw), str(out), vocab=K, workers=1)
    assert "up to date, skipped" in capsys.readouterr().out
    assert os.path.getmtime(out / "prepare.json") == stamp
    stats = bible_words.prepare(str(raw), str(out), vocab=K + 1, workers=1)
    assert stats["vocab"] == K + 1
    assert len((out / "vocab" / "dict.es.txt").read_text().splitlines()) == K + 1
    bible_words.prepare(str(raw), str(out), vocab=K, workers=1)  # as the other tests expect


def test_missing_raw_files_name_the_option_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"--raw-dir .* lacks train.es.*prepare.sh"):
        bible_words.prepare(str(tmp_path), str(tmp_path / "out"))
