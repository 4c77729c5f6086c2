"""Bad input through fairseq's command-line tools, run in this process (``cli``) so
that a test sees the exception itself: checkpoints of another model given to
--restore-file or to generate with overrides they cannot take, sources longer than
--max-source-positions, and odd lines fed to fairseq-interactive; their output is
what the tools print (test_bad_input.py checks the same errors on the models)."""

import contextlib
import importlib
import io
import random
import sys

import pytest
import torch
from conftest import USER_DIR, train_args

from luong_plugin.modules.options import CheckpointMismatchError

# -- the command-line tools -------------------------------------------------------


def cli(tool, *argv, stdin=b""):
    """Run fairseq_cli.<tool> in this process; returns what it printed.

    stdin is decoded as Python decodes a real one under the C and C.UTF-8
    locales: invalid bytes become surrogates (``surrogateescape``)."""
    module = importlib.import_module(f"fairseq_cli.{tool}")
    out = io.StringIO()
    saved = sys.argv, sys.stdin
    sys.argv = [f"fairseq-{tool}", *map(str, argv)]
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
    try:
        with contextlib.redirect_stdout(out):
            module.cli_main()
    finally:
        sys.argv, sys.stdin = saved
    return out.getvalue()


def rows(output, prefix):
    return [line.split("\t") for line in output.splitlines() if line.startswith(prefix + "-")]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A raw-text es-en corpus over 30-word vocabularies (no preprocessing needed)."""
    root = tmp_path_factory.mktemp("raw")
    rng = random.Random(0)
    words = {lang: [f"{lang}{i}" for i in range(30)] for lang in ("es", "en")}
    for lang in words:
        (root / f"dict.{lang}.txt").write_text("".join(f"{w} 10\n" for w in words[lang]))
    for split, n in (("train", 40), ("valid", 8), ("test", 8)):
        lengths = [rng.randint(1, 12) for _ in range(n)]
        for lang in words:
            lines = [" ".join(rng.choice(words[lang]) for _ in range(k)) for k in lengths]
            (root / f"{split}.es-en.{lang}").write_text("\n".join(lines) + "\n")
    return root


MODELS = {
    "local-p": ("luong_tiny",),
    "local-m": ("luong_tiny", "--attention-window", "local-m"),
    "global": ("luong_tiny", "--attention-window", "global"),
    "location": ("luong_tiny", "--attention-window", "global", "--attention-score", "location"),
    "rnnsearch": ("bahdanau_tiny",),
}


def train(data, save_dir, arch, *extra, updates=3):
    model = ("--arch", arch, *extra, "--dataset-impl", "raw")
    schedule = ("--max-update", updates, "--disable-validation")
    args = train_args(data, save_dir, *model, max_tokens=500, schedule=schedule, log_format=None)
    return cli("train", *args)


@pytest.fixture(scope="module")
def checkpoints(data, tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    paths = {}
    for name, (arch, *extra) in MODELS.items():
        train(data, root / name, arch, *extra)
        paths[name] = root / name / "checkpoint_last.pt"
    return paths


def raw_generate(data, checkpoint, *extra):
    """fairseq-generate on the raw-text test set, every sentence kept."""
    return cli(
        "generate",
        data,
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoint,
        "--dataset-impl",
        "raw",
        "--gen-subset",
        "test",
        "--required-batch-size-multiple",
        "1",
        *extra,
    )


def interactive(data, checkpoint, *extra, stdin):
    return cli(
        "interactive",
        data,
        "--user-dir",
        USER_DIR,
        "--path",
        checkpoint,
        "--source-lang",
        "es",
        "--target-lang",
        "en",
        "--beam",
        "3",
        "--max-len-b",
        "6",
        *extra,
        stdin=stdin,
    )


LONG_LINE = b" ".join([b"es1", b"es2"] * 1000)  # 2,000 tokens


@pytest.mark.slow
@pytest.mark.parametrize("model", ["local-p", "local-m", "global", "rnnsearch"])
def test_interactive_odd_lines(data, checkpoints, model):
    """Empty lines, a one-word line, unknown words, invalid UTF-8 and a 2,000-token
    line (allowed by --max-source-positions) all translate, with finite scores;
    unknown words and undecodable bytes read as <unk>."""
    lines = [b"", b"es3", b"", b"zzz es4 \xe6\xbc\xa2\xe5\xad\x97", b"es5 \xff\xfe es6", LONG_LINE]
    out = interactive(
        data, checkpoints[model], "--max-source-positions", "3000", stdin=b"\n".join(lines) + b"\n"
    )
    sources, hyps, scores = rows(out, "S"), rows(out, "H"), rows(out, "P")
    assert len(hyps) == len(lines)
    assert [s[1].split() for s in sources[:5]] == [
        [],
        ["es3"],
        [],
        ["<unk>", "es4", "<unk>"],
        ["es5", "<unk>", "es6"],
    ]
    assert len(sources[5][1].split()) == 2000  # not truncated
    for row in scores:
        assert all(torch.isfinite(torch.tensor(float(p))) for p in row[1].split())


@pytest.mark.slow
def test_source_longer_than_max_source_positions(data, checkpoints, caplog):
    """fairseq refuses a source longer than --max-source-positions, naming
    --skip-invalid-size-inputs-valid-test and the limit; the recurrent models set
    no limit of their own, so raising --max-source-positions is enough (the
    location score keeps its own, it has no weights for more positions)."""
    with pytest.raises(
        Exception,
        match=r"Size of sample #0 is invalid \(=\(2001, 0\)\) since "
        r"max_positions=\(1024, 1024\), skip this example with "
        "--skip-invalid-size-inputs-valid-test, or raise the limit with "
        "--max-source-positions",
    ):
        interactive(data, checkpoints["local-p"], stdin=LONG_LINE + b"\n")
    with pytest.raises(Exception, match=r"max_positions=\(1024, 1024\)"):
        interactive(
            data, checkpoints["location"], "--max-source-positions", "3000", stdin=LONG_LINE + b"\n"
        )
    # skipping is announced, never silent, and the other lines are translated
    out = interactive(
        data,
        checkpoints["rnnsearch"],
        "--skip-invalid-size-inputs-valid-test",
        stdin=b"es1 es2\n" + LONG_LINE + b"\nes3\n",
    )
    assert [row[0] for row in rows(out, "H")] == ["H-0", "H-2"]
    assert "1 samples have invalid sizes and will be skipped" in caplog.text
    generate = ("--beam", "2", "--max-len-b", "4")
    with pytest.raises(Exception, match="skip this example with --skip-invalid-size-inputs"):
        raw_generate(data, checkpoints["global"], *generate, "--max-source-positions", "5")
    out = raw_generate(data, checkpoints["global"], *generate, "--max-source-positions", "50")
    assert len(rows(out, "H")) == 8


@pytest.mark.slow
def test_invalid_utf8_under_strict_decoding_names_the_byte(data, checkpoints, tmp_path):
    """Where Python decodes strictly (a --input file; stdin under a UTF-8 locale
    other than C.UTF-8) fairseq stops at the first undecodable byte, naming it."""
    path = tmp_path / "input.es"
    path.write_bytes(b"es5 \xff es6\n")
    message = r"'utf-8' codec can't decode byte 0xff in position 4: invalid start byte"
    with pytest.raises(UnicodeDecodeError, match=message):
        interactive(data, checkpoints["local-p"], "--input", path, stdin=b"")


@pytest.mark.slow
def test_generate_with_overrides_the_checkpoint_cannot_take(data, checkpoints):
    with pytest.raises(CheckpointMismatchError) as err:
        raw_generate(
            data, checkpoints["local-p"], "--model-overrides", "{'attention_window': 'global'}"
        )
    assert "--attention-window: checkpoint local-p, model global or local-m" in str(err.value)
    # an override that keeps the parameters is the user's to make: it loads and decodes
    out = raw_generate(
        data,
        checkpoints["global"],
        "--max-len-b",
        "4",
        "--model-overrides",
        "{'attention_window': 'local-m'}",
    )
    assert len(rows(out, "H")) == 8


@pytest.mark.slow
def test_restore_file_of_another_model(data, checkpoints, tmp_path):
    """fairseq-train wraps the load error in its own; ours is the cause it shows."""
    with pytest.raises(Exception, match="Cannot load model parameters") as err:
        train(data, tmp_path, "bahdanau_tiny", "--restore-file", checkpoints["local-p"])
    cause = err.value.__context__
    assert isinstance(cause, CheckpointMismatchError)
    assert str(cause).startswith("the checkpoint holds a luong model, not a bahdanau model")
