"""recipes/own_text: each bad input stops run.sh with its message and nothing written (the
checks themselves: test_parallel_text.py), run.sh --dry-run's commands through
fairseq's own parsers, a rerun's record (recipes/own_text/prepare.py), and one run end to
end on a slice of the Bible."""

import json
import os
import shlex
import subprocess

import pytest
from conftest import REPO, VENV_BIN
from own_text_files import pair, write

from luong_plugin.modules.precision import default_precision

RUN = os.path.join(REPO, "recipes", "own_text", "run.sh")
PREPARE = os.path.join(REPO, "recipes", "own_text", "prepare.py")  # run.sh's step 1


def run_sh(*args, **env):
    env = dict(os.environ, PYTHON=os.path.join(VENV_BIN, "python"), THREADS="1", **env)
    return subprocess.run(["bash", RUN, *map(str, args)], capture_output=True, text=True, env=env)


def tree(root):
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(root) for f in dirs + files)


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
        "lenpen": ((*ok, "--lenpen", "1,1.0"), ["--lenpen '1,1.0': give each value once"]),
    }


@pytest.mark.parametrize(
    "case",
    ["missing", "counts", "empty", "utf8", "model", "budgets", "minutes", "epochs", "small",
     "half-pair", "precision", "own-flag", "lenpen"],
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
                if line.startswith(("fairseq-", "python "))}  # fmt: skip
    dry_run.search = commands.get("python")  # the --lenpen search, when there is one
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
    # the test's --lenpen is the value the search prints; the search decodes the valid lines
    # as the test's are decoded, without the maps
    assert generate[-2:] == ["--lenpen", "CHOSEN"]
    args = parsed(generate[:-2], options.get_generation_parser)
    assert args.path == str(out / "checkpoints" / "checkpoint_best.pt") and args.beam == 5
    assert args.required_batch_size_multiple == 1 and args.print_alignment == "soft"
    assert args.gen_subset == "test"
    search = dry_run.search
    assert search[:3] == ["python", "-m", "luong_plugin.analysis.lenpen"]
    assert search[search.index("--lenpens") + 1] == "auto"
    assert search[search.index("--reference") + 1] == str(out / "raw" / "valid.en")
    command = search[search.index("--") + 1 :]
    assert command[0].endswith("with_tcmalloc") and command[1].endswith("fairseq-generate")
    valid = parsed(command[1:], options.get_generation_parser)
    assert valid.gen_subset == "valid" and valid.print_alignment is None
    assert {k: v for k, v in vars(valid).items() if k not in ("gen_subset", "print_alignment")} == {
        k: v for k, v in vars(args).items() if k not in ("gen_subset", "print_alignment")
    }


def test_dry_run_global_with_epochs_and_flags_after_the_double_dash(tmp_path):
    from fairseq import options

    train, generate, _ = dry_run(
        tmp_path, "--model", "global", "--epochs", "3", "--seed", "7", "--beam", "4",
        "--lenpen", "1.4", "--", "--max-tokens", "4000", "--encoder-layers", "2", PRECISION="fp32",
    )  # fmt: skip
    args = parsed(train, options.get_training_parser)
    assert args.arch == "luong_recommended_global" and args.attention_window == "global"
    assert (args.max_epoch, args.stop_time_hours, args.seed) == (3, 0, 7)
    assert (args.max_tokens, args.encoder_layers, args.precision) == (4000, 2, "fp32")
    decode = parsed(generate, options.get_generation_parser)
    assert (decode.beam, decode.lenpen) == (4, 1.4) and dry_run.search is None  # one value


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
    the length penalty chosen on the valid lines, beam search, scores and the explorer; a
    second run does each step no more."""
    out = tmp_path / "es-en"
    args = (
        "--src", bible / "raw" / "train.es", "--tgt", bible / "raw" / "train.en", "--out", out,
        "--valid", "20", "--test", "20", "--vocab", "500", "--epochs", "1", "--lenpen", "1,2",
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
    search = json.loads((out / "valid" / "lenpen.json").read_text())
    assert sorted(search["scores"]) == ["1", "2"] and search["sentences"] == 20
    assert report["lenpen"] == search["chosen"]
    assert f"--lenpen {search['chosen']:g}" in (out / ".decoded").read_text()
    summary = (out / "summary.txt").read_text()
    assert str(checkpoint) in summary and str(out / "explore.html") in summary
    assert f"--lenpen {search['chosen']:g}, chosen on the valid lines" in summary
    stamp = checkpoint.stat().st_mtime_ns

    again = run_sh(*args, PRECISION="fp32")
    assert again.returncode == 0, again.stderr[-3000:]
    for step in ("spm", "fairseq-preprocess", "train", "lenpen", "generate", "report", "explore"):
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
