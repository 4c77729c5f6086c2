"""A user's own parallel text: read and check a pair of raw files, hold lines out.

``recipes/own_text/run.sh`` checks its options and its input files with this module
(through ``recipes/own_text/prepare.py``, run as a script: no fairseq import) before it
writes anything:

- ``parse_options``: run.sh's options (``--model`` local-p, global or local-m, one budget of
  ``--minutes`` or ``--epochs``, whole numbers where a count is due, language codes) and
  the fairseq-train flags after ``--``;
- ``read_pair``: each file exists and is UTF-8, no line is empty, the two sides have as
  many lines;
- ``read_corpus``: the pairs of ``--src``/``--tgt`` and of the valid and test files
  where given, the valid and test lines drawn from ``--src``/``--tgt`` (``split``,
  seeded) where not, enough left to train on, a ``--vocab`` that holds every character.

A bad input raises ``InputError`` with one line naming the option, the file and the line.

Lines are split on ``\\n`` only. A ``\\r\\n`` line end becomes ``\\n``, and any other
character that ``str.splitlines`` (which the SentencePiece step reads lines with) or
universal newlines (fairseq-preprocess) would break a line on becomes a space, so every
tool sees the same lines; a UTF-8 byte-order mark is dropped.
"""

import argparse
import hashlib
import os
import random
import re
from dataclasses import dataclass, field
from typing import Dict, List, Sequence, Tuple

MAX_HELD_OUT = 1000  # default valid and test size: 1000 lines or 5%, whichever is smaller
HELD_OUT_SHARE = 0.05
MIN_TRAIN = 100  # fewer training pairs than this cannot train a translation model
SHOWN = 5  # line numbers quoted in a message
LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # str.splitlines' breaks but \n
MODELS = {
    "local-p": "luong_recommended",
    "global": "luong_recommended_global",
    "local-m": "luong_recommended_local_m",
}
LANG = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,15}$")
SPLITS = ("train", "valid", "test")
# fairseq-train flags that run.sh sets from its own options
OWN_FLAGS = {
    "--arch": "--model",
    "--seed": "--seed",
    "--max-epoch": "--epochs",
    "--stop-time-hours": "--minutes",
    "--save-dir": "--out",
    "--source-lang": "--src-lang",
    "-s": "--src-lang",
    "--target-lang": "--tgt-lang",
    "-t": "--tgt-lang",
}


class InputError(ValueError):
    """A bad input or option: the message names it and says what is expected."""


@dataclass
class TextFile:
    path: str
    lines: List[str]
    sha256: str
    crlf: int = 0  # lines that ended in \r\n
    breaks: List[int] = field(default_factory=list)  # lines where other breaks became spaces


def read_text(path: str, option: str) -> TextFile:
    """The lines of one raw file, checked: it exists, it is UTF-8, no line is empty."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{option} {path}: {e.strerror.lower()}")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1)
        bad = data[e.start : e.end]
        raise InputError(
            f"{option} {path}: not UTF-8 at line {line}, byte offset {column} in the line "
            f"({e.start} in the file): {bad!r}; convert the file to UTF-8"
        )
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise InputError(f"{option} {path} is empty")
    if "\r" in text and "\n" not in text:
        raise InputError(f"{option} {path}: its lines end in \\r alone; convert them to \\n")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final line's \n
    result = TextFile(path, lines, hashlib.sha256(data).hexdigest())
    for i, line in enumerate(lines):
        if line.endswith("\r"):
            line = line[:-1]
            result.crlf += 1
        if any(c in LINE_BREAKS for c in line):
            line = "".join(" " if c in LINE_BREAKS else c for c in line)
            result.breaks.append(i + 1)
        lines[i] = line
    empty = [i + 1 for i, line in enumerate(lines) if not line.strip()]
    if empty:
        raise InputError(
            f"{option} {path}: {plural(len(empty), 'empty line')} ({numbers(empty)}); every "
            "line must hold a sentence: remove the pair from both files"
        )
    return result


def read_pair(src: str, tgt: str, src_option="--src", tgt_option="--tgt"):
    """Both sides of a parallel text, checked, with as many lines each."""
    for path, option in ((src, src_option), (tgt, tgt_option)):
        if not os.path.isfile(path):
            reason = "is a directory" if os.path.isdir(path) else "no such file"
            raise InputError(f"{option} {path}: {reason}")
    source, target = read_text(src, src_option), read_text(tgt, tgt_option)
    if len(source.lines) != len(target.lines):
        raise InputError(
            f"{src_option} {src} has {len(source.lines):,} lines but {tgt_option} {tgt} has "
            f"{len(target.lines):,}: the two files must be line-aligned, one sentence pair a line"
        )
    return source, target


def plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def numbers(lines: Sequence[int]) -> str:
    shown = ", ".join(map(str, lines[:SHOWN]))
    return f"line{'s' if len(lines) > 1 else ''} {shown}{', ...' if len(lines) > SHOWN else ''}"


def default_held_out(n_lines: int) -> int:
    """Valid (and test) lines held out when no size is given: 1000 or 5%, the smaller."""
    return min(MAX_HELD_OUT, int(n_lines * HELD_OUT_SHARE))


def split(n_lines: int, valid: int, test: int, seed: int) -> Dict[str, List[int]]:
    """Line indices of train, valid and test: ``valid + test`` lines drawn at random
    (seeded), each split kept in the file's order."""
    drawn = random.Random(seed).sample(range(n_lines), valid + test)
    held = set(drawn)
    return {
        "train": [i for i in range(n_lines) if i not in held],
        "valid": sorted(drawn[:valid]),
        "test": sorted(drawn[valid:]),
    }


def required_pieces(lines) -> int:
    """The pieces SentencePiece must have (spm.py trains with character_coverage=1.0):
    every character but the space, its word-boundary mark and ``<unk>``."""
    chars = set()
    for line in lines:
        chars.update(line)
    return len(chars - {" ", "\u2581"}) + 2


# ---- options ----------------------------------------------------------------


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line from the caller, no usage block
        raise InputError(message)


def options_parser() -> argparse.ArgumentParser:
    # fmt: off
    p = Parser(prog="recipes/own_text/run.sh", description="Train and evaluate "
               "luong_recommended on your own parallel text (recipes/own_text/README.md).",
               usage="%(prog)s --src FILE --tgt FILE --out DIR [options] [-- fairseq-train "
               "flags]")
    p.add_argument("--src", required=True, help="source text, one sentence a line (UTF-8)")
    p.add_argument("--tgt", required=True, help="target text, line-aligned with --src")
    p.add_argument("--out", required=True, help="everything is written under this directory")
    for split_name in ("valid", "test"):
        p.add_argument(f"--{split_name}-src", help=f"{split_name} source file (instead of "
                       "holding lines out)")
        p.add_argument(f"--{split_name}-tgt", help=f"{split_name} target file")
        p.add_argument(f"--{split_name}", metavar="N", help=f"hold out N {split_name} lines "
                       "(default: 1000 or 5%%, the smaller)")
    p.add_argument("--split-seed", default="1", help="seed of the held-out lines (default 1)")
    p.add_argument("--vocab", default="8000", help="joint SentencePiece size (default 8000)")
    p.add_argument("--model", default="local-p", help="local-p (default), global or local-m")
    p.add_argument("--minutes", help="train for M minutes (default 15)")
    p.add_argument("--epochs", help="train for E epochs instead")
    p.add_argument("--seed", default="1", help="training seed (default 1)")
    p.add_argument("--beam", default="5", help="beam size for the test set (default 5)")
    p.add_argument("--lenpen", default="auto", help="fairseq-generate's --lenpen for the test "
                   "set: auto (default: chosen on the valid set), a number, or numbers "
                   "separated by commas to choose among")
    p.add_argument("--src-lang", help="source language code (default: --src's extension)")
    p.add_argument("--tgt-lang", help="target language code (default: --tgt's extension)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the inputs, print the fairseq commands, write nothing")
    # fmt: on
    return p


def whole(option: str, value: str, least: int, what: str) -> int:
    if not re.fullmatch(r"[0-9]+", value or "") or int(value) < least:
        raise InputError(f"{option} {value!r}: expected {what}")
    return int(value)


def parse_options(argv: Sequence[str]) -> argparse.Namespace:
    """run.sh's options (before ``--``) and the fairseq-train flags after it, checked."""
    argv, extra = list(argv), []
    if "--" in argv:
        argv, extra = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    args = options_parser().parse_args(argv)
    args.extra = extra
    if args.model not in MODELS:
        raise InputError(f"--model {args.model!r}: expected one of {', '.join(MODELS)}")
    args.arch = MODELS[args.model]
    if args.minutes is not None and args.epochs is not None:
        raise InputError("--minutes and --epochs both given: choose one training budget")
    if args.epochs is not None:
        args.epochs = whole("--epochs", args.epochs, 1, "a whole number of epochs >= 1")
    else:
        minutes = "15" if args.minutes is None else args.minutes
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", minutes) or float(minutes) <= 0:
            raise InputError(
                f"--minutes {minutes!r}: expected a number of minutes > 0, such as 15 or 2.5"
            )
        args.minutes = float(minutes)
    for option in ("vocab", "beam"):
        value = getattr(args, option)
        setattr(args, option, whole(f"--{option}", value, 1, "a whole number >= 1"))
    args.lenpen = lenpens(args.lenpen)
    for option in ("seed", "split_seed"):
        name = "--" + option.replace("_", "-")
        setattr(args, option, whole(name, getattr(args, option), 0, "a whole number >= 0"))
    for split_name in ("valid", "test"):
        files = [getattr(args, f"{split_name}_{side}") for side in ("src", "tgt")]
        if any(files) and not all(files):
            raise InputError(f"--{split_name}-src and --{split_name}-tgt go together: give both")
        size = getattr(args, split_name)
        if any(files) and size is not None:
            raise InputError(
                f"--{split_name} {size} and --{split_name}-src/-tgt both given: "
                "hold lines out or give files, not both"
            )
        if size is not None:
            setattr(args, split_name, whole(f"--{split_name}", size, 1, "a whole number >= 1"))
    args.src_lang, args.tgt_lang = languages(args)
    for flag in extra:
        name = flag.split("=")[0]
        if name in OWN_FLAGS:
            raise InputError(f"-- {name}: run.sh sets this flag; use {OWN_FLAGS[name]} instead")
    return args


LENPENS = re.compile(r"[0-9]+(\.[0-9]+)?(,[0-9]+(\.[0-9]+)?)*")


def lenpens(value: str) -> str:
    """``--lenpen``: auto, one value >= 0, or values separated by commas, each once (the
    check of luong_plugin/analysis/lenpen.py, which chooses among them)."""
    if value == "auto":
        return value
    if not LENPENS.fullmatch(value):
        raise InputError(
            f"--lenpen {value!r}: expected auto (chosen on the valid set), a number >= 0 such as "
            "1 (fairseq's default), or such numbers separated by commas to choose among"
        )
    values = [f"{float(v):g}" for v in value.split(",")]  # as the search names their files
    if len(set(values)) != len(values):
        raise InputError(f"--lenpen {value!r}: give each value once")
    return value


def languages(args) -> Tuple[str, str]:
    """--src-lang/--tgt-lang, else the files' extensions when both are codes and differ,
    else src and tgt."""
    guess = [os.path.splitext(p)[1][1:] for p in (args.src, args.tgt)]
    if not all(LANG.match(g) for g in guess) or guess[0] == guess[1]:
        guess = ["src", "tgt"]
    langs = [args.src_lang or guess[0], args.tgt_lang or guess[1]]
    for option, lang in zip(("--src-lang", "--tgt-lang"), langs):
        if not LANG.match(lang):
            raise InputError(
                f"{option} {lang!r}: expected a code of letters, digits and _ such as es or en"
            )
    if langs[0] == langs[1]:
        raise InputError(f"--src-lang and --tgt-lang are both {langs[0]!r}: give two codes")
    return langs[0], langs[1]


# ---- the corpus -----------------------------------------------------------------


@dataclass
class Corpus:
    splits: Dict[str, Tuple[List[str], List[str]]]  # train/valid/test: (sources, targets)
    inputs: Dict[str, TextFile]  # option: file
    held_out: Dict[str, int]  # valid/test drawn from --src/--tgt: lines
    notes: List[str]


def read_corpus(args) -> Corpus:
    """Every input file checked, and the three splits."""
    source, target = read_pair(args.src, args.tgt)
    inputs = {"--src": source, "--tgt": target}
    given = {}
    for name in ("valid", "test"):
        if getattr(args, f"{name}_src"):
            pair = read_pair(
                getattr(args, f"{name}_src"),
                getattr(args, f"{name}_tgt"),
                f"--{name}-src",
                f"--{name}-tgt",
            )
            inputs[f"--{name}-src"], inputs[f"--{name}-tgt"] = pair
            given[name] = (pair[0].lines, pair[1].lines)
    n = len(source.lines)
    sizes = {
        name: getattr(args, name) or default_held_out(n)
        for name in ("valid", "test")
        if name not in given
    }
    held = sum(sizes.values())
    if n - held < MIN_TRAIN or 0 in sizes.values():
        kept = (
            f"holding out {held:,} for {' and '.join(sizes)} leaves {n - held:,}, and "
            if held
            else ""
        )
        files = " and ".join(f"--{name}-src/--{name}-tgt" for name in sizes)
        raise InputError(
            f"--src {args.src}: {plural(n, 'sentence pair')} are too few: {kept}the recipe needs "
            f"at least {MIN_TRAIN} to train on; give more text"
            + (f", or files ({files}) instead of held-out lines" if sizes else "")
        )
    rows = split(n, sizes.get("valid", 0), sizes.get("test", 0), args.split_seed)
    splits = {
        name: given.get(name)
        or ([source.lines[i] for i in rows[name]], [target.lines[i] for i in rows[name]])
        for name in SPLITS
    }
    needed = required_pieces(splits["train"][0] + splits["train"][1])
    if needed > args.vocab:
        raise InputError(
            f"--vocab {args.vocab}: the training text has {needed - 2:,} distinct characters, "
            "and SentencePiece makes each one a piece (with the word boundary and <unk>, "
            f"{needed:,}): give --vocab {needed} or more"
        )
    notes = []
    for option, f in inputs.items():
        if f.crlf:
            notes.append(
                f"note: {option} {f.path}: {plural(f.crlf, 'line')} ended in \\r\\n, read as \\n"
            )
        if f.breaks:
            notes.append(
                f"note: {option} {f.path}: line-break characters other than \\n in "
                f"{plural(len(f.breaks), 'line')} ({numbers(f.breaks)}) became spaces"
            )
    seen = set(splits["train"][0])
    repeated = sum(line in seen for line in splits["test"][0])
    if repeated:
        notes.append(
            f"note: {repeated:,} of {len(splits['test'][0]):,} test sources occur in the "
            "training text as well (the same line)"
        )
    return Corpus(splits, inputs, sizes, notes)
