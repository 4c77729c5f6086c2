"""luong_plugin/corpora/parallel_text.py, the checks and the split of a user's own text
(recipes/own_text): each bad input named with its option, its line and its byte; line ends
made plain; the held-out lines; the vocabulary SentencePiece needs; the languages."""

import pytest
from own_text_files import pair, write

from luong_plugin.corpora import parallel_text
from luong_plugin.corpora.parallel_text import InputError


def options(src, tgt, out, *more):
    argv = ["--src", src, "--tgt", tgt, "--out", out, *more]
    return parallel_text.parse_options([str(a) for a in argv])


def test_a_missing_file_is_named_with_its_option(tmp_path):
    src, _ = pair(tmp_path)
    with pytest.raises(InputError, match=r"^--tgt .*nope\.en: no such file$"):
        parallel_text.read_pair(src, tmp_path / "nope.en")
    with pytest.raises(InputError, match=r"^--src .*: is a directory$"):
        parallel_text.read_pair(tmp_path, src)


def test_unequal_line_counts_give_both_counts(tmp_path):
    src, _ = pair(tmp_path, n=1200)
    tgt = write(tmp_path / "short.en", ["a sentence"] * 1198)
    with pytest.raises(InputError) as error:
        parallel_text.read_pair(src, tgt)
    message = str(error.value)
    assert f"--src {src} has 1,200 lines but --tgt {tgt} has 1,198" in message
    assert "line-aligned" in message


def test_empty_lines_are_named_the_first_five(tmp_path):
    lines = ["a sentence"] * 30
    for i in (2, 5, 6, 11, 20, 24, 29):  # 0-based; whitespace alone is empty too
        lines[i] = "" if i % 2 else " \t "
    src = write(tmp_path / "gaps.es", lines)
    with pytest.raises(InputError) as error:
        parallel_text.read_text(src, "--src")
    assert str(error.value).startswith(f"--src {src}: 7 empty lines (lines 3, 6, 7, 12, 21, ...)")


def test_invalid_utf8_gives_the_line_and_the_byte_offset(tmp_path):
    src = tmp_path / "latin1.es"
    src.write_bytes("una línea\n".encode() + b"caf\xe9 con leche\n")
    with pytest.raises(InputError) as error:
        parallel_text.read_text(src, "--src")
    assert str(error.value) == (
        f"--src {src}: not UTF-8 at line 2, byte offset 3 in the line (14 in the file): "
        "b'\\xe9'; convert the file to UTF-8"
    )


def test_line_ends_and_breaks_inside_a_line_are_made_plain(tmp_path):
    """\\r\\n ends, a byte-order mark, and the breaks other tools split lines on."""
    src = tmp_path / "dos.es"
    src.write_bytes("\ufeffuno\r\ndos\u2028tres\r\ncuatro\x0ccinco".encode())
    text = parallel_text.read_text(src, "--src")
    assert text.lines == ["uno", "dos tres", "cuatro cinco"]
    assert (text.crlf, text.breaks) == (2, [2, 3])
    assert all(len(line.splitlines()) == 1 for line in text.lines)
    mac = tmp_path / "mac.es"
    mac.write_bytes(b"uno\rdos\r")  # one line to fairseq, two to str.splitlines
    with pytest.raises(InputError, match=r"mac\.es: its lines end in \\r alone"):
        parallel_text.read_text(mac, "--src")


def test_the_notes_say_what_was_changed_and_what_repeats(tmp_path):
    src = tmp_path / "same.es"
    src.write_bytes(b"la misma frase\r\n" * 3 + b"la misma frase\n" * 197)
    tgt = write(tmp_path / "same.en", [f"sentence number {i}" for i in range(200)])
    notes = parallel_text.read_corpus(options(src, tgt, tmp_path / "out")).notes
    assert notes == [
        f"note: --src {src}: 3 lines ended in \\r\\n, read as \\n",
        "note: 10 of 10 test sources occur in the training text as well (the same line)",
    ]


def test_an_empty_file_is_refused(tmp_path):
    src = write(tmp_path / "none.es", [])
    with pytest.raises(InputError, match=r"^--src .*none\.es is empty$"):
        parallel_text.read_text(src, "--src")


def test_held_out_lines_are_seeded_disjoint_and_in_file_order():
    assert parallel_text.default_held_out(2000) == 100  # 5%
    assert parallel_text.default_held_out(10**6) == 1000  # at most 1000
    rows = parallel_text.split(300, 15, 20, seed=1)
    assert rows == parallel_text.split(300, 15, 20, seed=1)
    assert rows != parallel_text.split(300, 15, 20, seed=2)
    assert [len(rows[s]) for s in ("train", "valid", "test")] == [265, 15, 20]
    assert sorted(rows["train"] + rows["valid"] + rows["test"]) == list(range(300))
    assert all(rows[s] == sorted(rows[s]) for s in rows)


def test_the_corpus_holds_out_valid_and_test_or_reads_their_files(tmp_path):
    src, tgt = pair(tmp_path, n=400)
    corpus = parallel_text.read_corpus(options(src, tgt, tmp_path / "out"))
    assert {s: len(corpus.splits[s][0]) for s in corpus.splits} == {
        "train": 360, "valid": 20, "test": 20,
    }  # fmt: skip
    pairs = [p for s in corpus.splits.values() for p in zip(*s)]
    assert len(set(pairs)) == 400 and all(e.split()[-1] == s.split()[-1] for e, s in pairs)
    test_src, test_tgt = pair(tmp_path, n=7, name="test")
    args = options(src, tgt, tmp_path / "out", "--test-src", test_src, "--test-tgt", test_tgt)
    corpus = parallel_text.read_corpus(args)
    assert corpus.held_out == {"valid": 20} and corpus.splits["test"][1][6] == "sentence number 6"
    assert len(corpus.splits["train"][0]) == 380


def test_a_corpus_too_small_to_split_is_refused(tmp_path):
    src, tgt = pair(tmp_path, n=150)
    with pytest.raises(InputError) as error:
        parallel_text.read_corpus(
            options(src, tgt, tmp_path / "out", "--valid", "30", "--test", "30")
        )
    assert str(error.value) == (
        f"--src {src}: 150 sentence pairs are too few: holding out 60 for valid and test "
        "leaves 90, and the recipe needs at least 100 to train on; give more text, or files "
        "(--valid-src/--valid-tgt and --test-src/--test-tgt) instead of held-out lines"
    )


def test_a_vocabulary_smaller_than_the_characters_is_refused(tmp_path):
    src = write(tmp_path / "zh.src", [chr(0x4E00 + i) * 3 + chr(0x5E00 + i) for i in range(200)])
    tgt = write(tmp_path / "en.tgt", [f"sentence {i}" for i in range(200)])
    args = options(src, tgt, tmp_path / "out", "--vocab", "300", "--valid", "5", "--test", "5")
    with pytest.raises(InputError) as error:
        parallel_text.read_corpus(args)
    assert str(error.value).startswith("--vocab 300: the training text has 395 distinct characters")
    assert str(error.value).endswith(
        "(with the word boundary and <unk>, 397): give --vocab 397 or more"
    )


def test_the_pieces_required_are_what_sentencepiece_requires(tmp_path):
    """spm.py trains at exactly ``required_pieces`` and refuses one fewer."""
    from luong_plugin.corpora import spm

    lines = [chr(0x4E00 + i) + chr(0x4F00 + i % 7) + " y más,\t¿qué? \u2581x" for i in range(150)]
    text = write(tmp_path / "text", lines)
    needed = parallel_text.required_pieces(lines)
    spm.train([str(text)], str(tmp_path / "exact"), needed)
    with pytest.raises(RuntimeError, match="Vocabulary size is smaller than required_chars"):
        spm.train([str(text)], str(tmp_path / "fewer"), needed - 1)


def test_languages_come_from_the_extensions_or_the_options():
    args = options("a.es", "a.en", "o")
    assert (args.src_lang, args.tgt_lang) == ("es", "en")
    args = options("a.txt", "b.txt", "o")
    assert (args.src_lang, args.tgt_lang) == ("src", "tgt")
    args = options("a.txt", "b.txt", "o", "--src-lang", "de", "--tgt-lang", "fr")
    assert (args.src_lang, args.tgt_lang) == ("de", "fr")


def test_lenpen_values_are_checked_as_the_search_names_their_files(tmp_path):
    """--lenpen: each value once, compared as lenpen.py names their decodings (%g), so that a
    list the recipe takes is one the search after training takes too."""
    from luong_plugin.analysis.lenpen import parse_lenpens

    out = tmp_path / "o"
    assert options("a.es", "a.en", out).lenpen == "auto"
    assert options("a.es", "a.en", out, "--lenpen", "1,1.001").lenpen == "1,1.001"
    assert parse_lenpens("1,1.001") == [1.0, 1.001]
    for same in ("1,1.0", "1,1.0000001"):
        with pytest.raises(InputError, match="give each value once"):
            options("a.es", "a.en", out, "--lenpen", same)
        with pytest.raises(Exception, match="each value once"):
            parse_lenpens(same)
    with pytest.raises(InputError, match="expected auto"):
        options("a.es", "a.en", out, "--lenpen", "1e3")
