"""Choose fairseq-generate's ``--lenpen`` on the valid split.

    python -m luong_plugin.analysis.lenpen --reference valid.en --out-dir DIR \\
        [--lenpens auto | 1,1.4,...] -- fairseq-generate DATA --path CKPT --gen-subset valid ...

fairseq's beam search ranks a finished hypothesis by its log-probability over its length to
the power ``--lenpen``; a larger power favours longer output. This runs the fairseq-generate
command given after ``--`` once for each value, with ``--lenpen VALUE`` added
(``DIR/lenpenVALUE.txt``, its stderr in ``.log``), turns each output's pieces back to text and
scores it with sacreBLEU and chrF2 against the raw references, and chooses the value of the
highest sacreBLEU, a tie going to the value nearest 1, then to the smaller. The command must
decode every sentence (``--required-batch-size-multiple 1``). A decoding is read again
instead of redone when it is whole (its log ends with fairseq-generate's count), newer than
the checkpoint of ``--path`` and made by the same command. The scores and the choice go to
``DIR/lenpen.json`` and stderr, the chosen value alone to stdout, for a recipe to read.

``--lenpens auto`` (the default) tries ``LENPENS``: ``make demo`` and ``recipes/own_text``
choose among them before they decode the test split. docs/LENGTH_PENALTY.md decoded twelve
runs on two corpora at 0.6 to 3: the valid split's choice scored at least the test sacreBLEU
of ``--lenpen 1`` in each of them, and chose a value of ``LENPENS`` in each.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
from typing import Dict, List

from .generate_output import parse_generate
from .report import bleu_lengths, hypotheses, score

# fairseq's default, 1, and the values docs/LENGTH_PENALTY.md's runs chose on the valid split
# among 0.6 to 3 (none chose 2.6 or 3); each costs the recipes one decoding of the valid split
LENPENS = (0.6, 1.0, 1.4, 1.8, 2.2)


def choose(bleu_by_lenpen: Dict[float, float]) -> float:
    """The length penalty of the highest sacreBLEU; a tie goes to the one nearest 1, then to
    the smaller (distances compared rounded, so 0.6 and 1.4 are equally far)."""
    if not bleu_by_lenpen:
        raise ValueError("no length penalty to choose from")
    return max(bleu_by_lenpen, key=lambda lp: (bleu_by_lenpen[lp], -round(abs(lp - 1), 9), -lp))


def scores(generate_output: str, references: List[str]) -> dict:
    """sacreBLEU, chrF2 and what BLEU owes to length (report.py's ``bleu_lengths``) of one
    fairseq-generate output against the raw references; a ValueError naming the lines
    without a hypothesis."""
    detokenised = hypotheses(parse_generate(generate_output), references)
    (bleu, _), (chrf, _) = score(detokenised, references)
    return {"bleu": round(bleu.score, 2), "chrf": round(chrf.score, 2), **bleu_lengths(bleu)}


def parse_lenpens(text: str) -> List[float]:
    """``auto`` (``LENPENS``) or comma-separated values >= 0, each once; argparse's type (and
    the recipes' check), so a bad list is refused at parse time."""
    if text == "auto":
        return list(LENPENS)
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            value = math.nan
        if not value >= 0 or math.isinf(value):  # not >= 0: also nan
            raise argparse.ArgumentTypeError(
                f"'{text}': expected auto or values >= 0 separated by commas, such as 1 or "
                "0.6,1,1.4"
            )
        values.append(value)
    if len({f"{v:g}" for v in values}) != len(values):  # as they name the decodings' files
        raise argparse.ArgumentTypeError(f"'{text}': each value once")
    return values


def whole_decoding(out: str, checkpoint: str) -> bool:
    """Whether ``out`` holds a whole decoding by this checkpoint: written after it, and its
    log (``out`` + ``.log``) ending with fairseq-generate's closing count, which a killed
    run never writes."""
    if not (os.path.exists(out) and os.path.exists(out + ".log")):
        return False
    if os.path.getmtime(out) < os.path.getmtime(checkpoint):
        return False
    with open(out + ".log", encoding="utf-8") as f:
        lines = f.read().strip().splitlines()
    return (
        bool(lines) and re.search(r"generate\W+Translated [\d,]+ sentences", lines[-1]) is not None
    )


def checkpoint_of(command: List[str]) -> str:
    """The checkpoint a fairseq-generate command decodes with (``--path``; the first of an
    ensemble)."""
    for i, arg in enumerate(command):
        if arg == "--path" and i + 1 < len(command):
            return command[i + 1].split(os.pathsep)[0]
        if arg.startswith("--path="):
            return arg[len("--path=") :].split(os.pathsep)[0]
    raise ValueError("the fairseq-generate command has no --path CHECKPOINT")


def decode(command: List[str], lenpen: float, out: str) -> str:
    """``command`` with ``--lenpen`` into ``out`` (stderr into ``out`` + ``.log``), unless a
    whole decoding by the same command is there; ``out``'s text."""
    full = [*command, "--lenpen", f"{lenpen:g}"]
    said = out + ".cmd"
    same = os.path.exists(said) and open(said, encoding="utf-8").read() == "\0".join(full)
    if not (same and whole_decoding(out, checkpoint_of(command))):
        if os.path.exists(said):
            os.remove(said)  # no command stays beside an output it did not make
        try:
            with open(out + ".tmp", "w", encoding="utf-8") as f, open(out + ".log", "w") as log:
                code = subprocess.call(full, stdout=f, stderr=log)
            failed = f"exit {code}" if code != 0 else None
        except OSError as error:  # no such program, say
            failed = f"{full[0]}: {error.strerror}"
        if failed:
            os.remove(out + ".tmp")
            raise RuntimeError(f"fairseq-generate failed ({failed}): see {out}.log")
        os.replace(out + ".tmp", out)
        with open(said, "w", encoding="utf-8") as f:
            f.write("\0".join(full))
    with open(out, encoding="utf-8") as f:
        return f.read()


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        usage="%(prog)s --reference REF --out-dir DIR [--lenpens auto|V,V,...] -- "
        "fairseq-generate ARGS...",
    )
    parser.add_argument("--reference", required=True, help="the raw valid references")
    parser.add_argument("--out-dir", required=True, help="each decoding, and lenpen.json")
    parser.add_argument("--lenpens", type=parse_lenpens, default=list(LENPENS),
                        help="auto (the default: %(default)s) or values separated by commas")  # fmt: skip
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="after --: the fairseq-generate command, without --lenpen")  # fmt: skip
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no fairseq-generate command after --")
    if any(a == "--lenpen" or a.startswith("--lenpen=") for a in command):
        parser.error("the command must not set --lenpen: --lenpens gives the values")
    try:
        checkpoint = checkpoint_of(command)
    except ValueError as error:
        parser.error(str(error))
    if not os.path.isfile(checkpoint):
        parser.error(f"--path {checkpoint}: no such checkpoint")
    if not os.path.isfile(args.reference):
        parser.error(f"--reference {args.reference}: no such file")

    with open(args.reference, encoding="utf-8") as f:
        references = f.read().splitlines()
    os.makedirs(args.out_dir, exist_ok=True)
    by_value = {}
    for lenpen in args.lenpens:
        out = os.path.join(args.out_dir, f"lenpen{lenpen:g}.txt")
        try:
            by_value[lenpen] = scores(decode(command, lenpen, out), references)
        except (RuntimeError, ValueError) as error:
            print(f"error: {out}: {error}", file=sys.stderr)
            sys.exit(1)
        r = by_value[lenpen]
        print(f"[lenpen] {lenpen:g}: valid sacreBLEU {r['bleu']:.2f}, chrF2 {r['chrf']:.2f}, "
              f"length ratio {r['length_ratio']}", file=sys.stderr)  # fmt: skip
    chosen = choose({lp: r["bleu"] for lp, r in by_value.items()})
    print(f"[lenpen] {chosen:g} chosen: the highest valid sacreBLEU", file=sys.stderr)
    result = {
        "reference": args.reference,
        "sentences": len(references),
        "command": command,
        "scores": {f"{lp:g}": r for lp, r in by_value.items()},
        "chosen": chosen,
    }
    with open(os.path.join(args.out_dir, "lenpen.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print(f"{chosen:g}")


if __name__ == "__main__":
    main()
