"""recipes/own_text: the checks of luong_plugin/corpora/parallel_text.py (each bad input
stops run.sh with its message and nothing written), run.sh --dry-run's commands through
fairseq's own parsers, a rerun's record (recipes/own_text/prepare.py), and one run end to
end on a slice of the Bible."""

import json
import os
import shlex
import subprocess

import pytest
from conftest import REPO, VENV_BIN

from luong_plugin.corpora import parallel_text
from luong_plugin.corpora.parallel_text import InputError
from luong_plugin.modules.precision import default_precision

RUN = os.path.join(REPO, "recipes", "own_text", "run.sh")
PREPARE = os.path.join(REPO, "recipes", "own_text", "prepare.py")  # run.sh's step 1


def write(path, lines):
    path.write_bytes(b"".join(line.encode() + b"\n" for line in lines))
    return path


def pair(tmp_path, n=200, name="corpus"):
    """A line-aligned pair of ``n`` distinct sentences, ``name.es`` and ``name.en``."""
    src = write(tmp_path / f"{name}.es", [f"la frase número {i}" for i in range(n)])
    tgt = write(tmp_path / f"{name}.en", [f"sentence number {i}" for i in range(n)])
    return src, tgt


def run_sh(*args, **env):
    env = dict(os.environ, PYTHON=os.path.join(VENV_BIN, "python"), THREADS="1", **env)
    return subprocess.run(["bash", RUN, *map(str, args)], capture_output=True, text=True, env=env)


def tree(root):
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(root) for f in dirs + files)


def options(src, tgt, out, *more):
    argv = ["--src", src, "--tgt", tgt, "--out", out, *more]
    return parallel_text.parse_options([str(a) for a in argv])


# ---- parallel_text.py ---------------------------------------------------------


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


# ---- run.sh: each bad input, its message, nothing written ------------------------


def bad_inputs(tmp_path):
    src, tgt = pair(tmp_path)
    short = write(tmp_path / "short.en", ["sentence"] * 199)
    gaps = write(tmp_path / "gaps.en", ["x"] * 10 + [""] + ["x"] * 189)
    latin1 = tmp_path / "latin1.en"
    latin1.write_bytes(b"one\ntwo\nthree\ncaf\xe9\n" + b"more\n" * 196)
    tiny_src, tiny_tgt = pair(tmp_path, n=60, name="tiny")
    ok = ("--src", src, "--tgt", tgt)
    return {
        "missing": ((*ok[:2], "--tgt", tmp_path / "nope.en"), ["--tgt", "nope.en: no such file"]),
        "counts": ((*ok[:2], "--tgt", short), ["has 200 lines but --tgt", "has 199"]),
        "empty": ((*ok[:2], "--tgt", gaps), ["--tgt", "gaps.en: 1 empty line (line 11)"]),
        "utf8": ((*ok[:2], "--tgt", latin1), ["--tgt", "not UTF-8 at line 4, byte offset 3"]),
        "model": (
            (*ok, "--model", "lstm"),
            ["--model 'lstm': expected one of local-p, global, local-m"],
        ),
        "budgets": ((*ok, "--minutes", "5", "--epochs", "2"), ["--minutes and --epochs both"]),
        "minutes": ((*ok, "--minutes", "ten"), ["--minutes 'ten': expected a number of minutes"]),
        "epochs": ((*ok, "--epochs", "1.5"), ["--epochs '1.5': expected a whole number"]),
        "small": (("--src", tiny_src, "--tgt", tiny_tgt), ["60 sentence pairs are too few"]),
        "half-pair": ((*ok, "--valid-src", src), ["--valid-src and --valid-tgt go together"]),
        "precision": (ok, ["PRECISION 'fp16': expected bf16 or fp32"]),  # with PRECISION=fp16
        "own-flag": (
            (*ok, "--", "--arch", "lstm"),
            ["-- --arch: run.sh sets this flag; use --model"],
        ),
    }


@pytest.mark.parametrize(
    "case",
    ["missing", "counts", "empty", "utf8", "model", "budgets", "minutes", "epochs", "small",
     "half-pair", "precision", "own-flag"],
)  # fmt: skip
def test_run_sh_stops_on_bad_input_with_one_line_and_writes_nothing(tmp_path, case):
    args, expected = bad_inputs(tmp_path)[case]
    out = tmp_path / "runs" / "mine"
    before = tree(tmp_path)
    if "--" in args:
        cut = args.index("--")
        args = (*args[:cut], "--out", out, *args[cut:])
    else:
        args = (*args, "--out", out)
    run = run_sh(*args, **({"PRECISION": "fp16"} if case == "precision" else {}))
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and run.stderr.startswith("error: "), run.stderr
    assert all(text in run.stderr for text in expected), run.stderr
    assert "fairseq-train" not in run.stdout
    assert tree(tmp_path) == before  # not even --out's parent


# ---- the record of a run: reruns, changed inputs ----------------------------------


def prepare(*args, ok=True):
    """recipes/own_text/prepare.py, as run.sh runs it: (exit status, stderr)."""
    cmd = [os.path.join(VENV_BIN, "python"), PREPARE, *map(str, args)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert (run.returncode == 0) == ok, run.stderr
    return run.returncode, run.stderr


def test_a_rerun_reuses_the_data_and_a_changed_input_is_refused(tmp_path):
    src, tgt = pair(tmp_path)
    out = tmp_path / "run"
    args = ("--src", src, "--tgt", tgt, "--out", out)
    assert "written" in prepare(*args)[1]
    record = (out / "run.json").read_text()
    assert json.loads(record)["sizes"] == {"train": 180, "valid": 10, "test": 10}
    assert sorted(os.listdir(out / "raw")) == [
        f"{s}.{l}" for s in ("test", "train", "valid") for l in ("en", "es")
    ]
    stamp = os.stat(out / "raw" / "train.es").st_mtime_ns
    assert "up to date" in prepare(*args)[1]
    assert os.stat(out / "raw" / "train.es").st_mtime_ns == stamp

    write(src, [f"la frase número {i}" for i in range(199)] + ["otra frase"])
    code, err = prepare(*args, ok=False)
    refused = f"error: --out {out} holds a run on other data (--src sha256 "
    assert code == 2 and err.startswith(refused)
    assert "--tgt" not in err and f"delete {out} to start over" in err
    code, err = prepare(*args, "--vocab", "4000", ok=False)
    assert code == 2 and "--vocab 8000 then, 4000 now" in err
    assert (out / "run.json").read_text() == record


def test_model_settings_are_refused_once_a_checkpoint_exists(tmp_path):
    src, tgt = pair(tmp_path)
    out = tmp_path / "run"
    args = ["--src", src, "--tgt", tgt, "--out", out]
    prepare(*args)
    prepare(*args, "--seed", "2")  # nothing trained yet: recorded
    assert json.loads((out / "run.json").read_text())["model"]["--seed"] == 2
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "checkpoint_last.pt").write_bytes(b"")
    prepare(*args, "--seed", "2", "--minutes", "60", "--beam", "10")
    code, err = prepare(*args, "--model", "global", "--", "--dropout", "0.3", ok=False)
    assert code == 2 and "holds a model trained with other settings" in err
    assert "--model 'local-p' then, 'global' now" in err and "--seed 2 then, 1 now" in err
    assert "-- flags none then, '--dropout 0.3' now" in err


def test_an_out_directory_of_something_else_is_refused(tmp_path):
    src, tgt = pair(tmp_path)
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "notes.txt").write_text("mine")
    code, err = prepare("--src", src, "--tgt", tgt, "--out", tmp_path / "home", ok=False)
    assert code == 2 and "is not a run of this recipe" in err
    assert os.listdir(tmp_path / "home") == ["notes.txt"]
    (tmp_path / "empty").mkdir()  # an empty directory is used
    prepare("--src", src, "--tgt", tgt, "--out", tmp_path / "empty")
    assert (tmp_path / "empty" / "run.json").exists()


# ---- run.sh --dry-run: the commands, through fairseq's parsers ----------------------


def dry_run(tmp_path, *more, **env):
    src, tgt = pair(tmp_path)
    out = tmp_path / "out"
    run = run_sh("--src", src, "--tgt", tgt, "--out", out, "--dry-run", *more, **env)
    assert run.returncode == 0, run.stderr
    assert not out.exists()  # a dry run writes nothing
    commands = {line.split()[0]: shlex.split(line) for line in run.stdout.splitlines()
                if line.startswith("fairseq-")}  # fmt: skip
    return commands["fairseq-train"], commands["fairseq-generate"], out


def parsed(command, parser):
    """A fairseq command line (the tool first) through fairseq's own parser."""
    from fairseq import options

    return options.parse_args_and_arch(parser(), command[1:])


def test_dry_run_trains_the_recommended_model_with_the_demos_optimisation(tmp_path):
    from fairseq import options

    train, generate, out = dry_run(tmp_path, "--minutes", "30")
    args = parsed(train, options.get_training_parser)
    assert args.arch == "luong_recommended" and args.attention_window == "local-p"
    assert (args.window_size, args.position_sigma, args.encoder_hidden_size) == (14, 5.0, 256)
    optimisation = (args.optimizer, args.adam_betas, args.lr, args.clip_norm)
    assert optimisation == ("adam", "(0.9, 0.98)", [0.003], 1.0)  # configs/luong_recommended.yaml
    assert (args.criterion, args.label_smoothing) == ("label_smoothed_cross_entropy", 0.1)
    assert args.max_tokens == 2000 and args.stop_time_hours == 0.5 and args.max_epoch == 0
    assert args.precision == default_precision()
    assert (args.source_lang, args.target_lang, args.seed) == ("es", "en", 1)
    assert args.data == str(out / "bin") and args.save_dir == str(out / "checkpoints")
    args = parsed(generate, options.get_generation_parser)
    assert args.path == str(out / "checkpoints" / "checkpoint_best.pt") and args.beam == 5
    assert args.required_batch_size_multiple == 1 and args.print_alignment == "soft"
    assert args.gen_subset == "test"


def test_dry_run_global_with_epochs_and_flags_after_the_double_dash(tmp_path):
    from fairseq import options

    train, generate, _ = dry_run(
        tmp_path, "--model", "global", "--epochs", "3", "--seed", "7", "--beam", "4",
        "--", "--max-tokens", "4000", "--encoder-layers", "2", PRECISION="fp32",
    )  # fmt: skip
    args = parsed(train, options.get_training_parser)
    assert args.arch == "luong_recommended_global" and args.attention_window == "global"
    assert (args.max_epoch, args.stop_time_hours, args.seed) == (3, 0, 7)
    assert (args.max_tokens, args.encoder_layers, args.precision) == (4000, 2, "fp32")
    assert parsed(generate, options.get_generation_parser).beam == 4


def test_dry_run_local_m(tmp_path):
    from fairseq import options

    train, _, _ = dry_run(tmp_path, "--model", "local-m", "--minutes", "1", PRECISION="fp32")
    args = parsed(train, options.get_training_parser)
    assert args.arch == "luong_recommended_local_m" and args.attention_window == "local-m"
    assert args.window_size == 14


# ---- end to end ---------------------------------------------------------------------


@pytest.mark.slow
def test_run_sh_on_a_bible_slice_end_to_end_then_again(bible, tmp_path):
    """Held-out split, SentencePiece, fairseq-preprocess, 20 updates of a 32-cell model,
    beam search, scores and the explorer; a second run does each step no more."""
    out = tmp_path / "es-en"
    args = (
        "--src", bible / "raw" / "train.es", "--tgt", bible / "raw" / "train.en", "--out", out,
        "--valid", "20", "--test", "20", "--vocab", "500", "--epochs", "1",
        "--", "--max-update", "20", "--encoder-embed-dim", "32", "--encoder-hidden-size", "32",
        "--decoder-embed-dim", "32", "--decoder-hidden-size", "32",
        "--decoder-out-embed-dim", "32",
    )  # fmt: skip
    run = run_sh(*args, PRECISION="fp32")  # the default precision: the dry-run test
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    checkpoint = out / "checkpoints" / "checkpoint_best.pt"
    assert checkpoint.exists() and (out / "explore.html").stat().st_size > 10_000
    report = json.loads((out / "report.json").read_text())
    assert report["sentences"] == 20 and report["training"]["updates"] == 20
    assert report["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert "nc:6" in report["chrf_signature"]
    assert f"sacreBLEU {report['bleu']:.2f}  ({report['bleu_signature']})" in run.stdout
    assert len((out / "test.hyp").read_text().splitlines()) == 20
    summary = (out / "summary.txt").read_text()
    assert str(checkpoint) in summary and str(out / "explore.html") in summary
    stamp = checkpoint.stat().st_mtime_ns

    again = run_sh(*args, PRECISION="fp32")
    assert again.returncode == 0, again.stderr[-3000:]
    for step in ("spm", "fairseq-preprocess", "train", "generate", "report", "explore"):
        assert f"[{step}] done, skipped" in again.stdout
    assert checkpoint.stat().st_mtime_ns == stamp
    assert again.stdout.endswith(summary)


def test_make_own_is_run_sh_with_the_readmes_arguments(tmp_path):
    """README's third command, `make own SRC= TGT= OUT= [ARGS=]`, runs this recipe: here
    with --dry-run, through make itself; without its variables it says how to call it."""
    src, tgt = pair(tmp_path)
    out = tmp_path / "out"
    run = subprocess.run(
        ["make", "-s", "own", f"SRC={src}", f"TGT={tgt}", f"OUT={out}", "ARGS=--dry-run"],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert any(line.startswith("fairseq-train ") for line in run.stdout.splitlines())
    assert not out.exists()
    bare = subprocess.run(["make", "-s", "own"], cwd=REPO, capture_output=True, text=True)
    assert bare.returncode != 0 and "usage: make own SRC=FILE TGT=FILE OUT=DIR" in bare.stderr
