"""recipes/own_text/run.sh's first step: check every option and input, then write
DIR/raw and DIR/run.json, and print the checked settings for run.sh.

    python recipes/own_text/prepare.py --src FILE.src --tgt FILE.tgt --out DIR \\
        [run.sh's options] [-- fairseq-train flags]

The checks are luong_plugin/corpora/parallel_text.py's, loaded from its file (importing
the package would import fairseq, ~5 s). A bad input stops here with exit status 2 and
one line, ``error: ...``, before anything is written. Otherwise DIR/raw/{train,valid,test}
.{xx,yy} and DIR/run.json appear together (built beside DIR, renamed to it). run.json
holds the SHA-256 of every input file and the options that shape the data (``data``)
and the model (``model``). A later run on the same DIR compares them: different data is
refused; different model settings are refused once DIR/checkpoints/checkpoint_last.pt
exists, and recorded before. The training budget, the beam and the length penalty are not
compared: a larger budget trains on, a new beam or length penalty decodes again. Prints
``NAME=value`` lines, shell-quoted, for run.sh to ``eval``.
"""

import importlib.util
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from typing import List, Optional, Tuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SPEC = importlib.util.spec_from_file_location(
    "parallel_text", os.path.join(REPO, "luong_plugin", "corpora", "parallel_text.py")
)
parallel_text = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(parallel_text)
Corpus, InputError, SPLITS = parallel_text.Corpus, parallel_text.InputError, parallel_text.SPLITS


def record(args, corpus: Corpus) -> dict:
    """What run.json holds: ``data`` and ``model`` are compared on a rerun (``differences``),
    ``files`` and ``sizes`` are for reading."""
    data = {option: f.sha256 for option, f in corpus.inputs.items()}
    data.update({f"--{name}": n for name, n in corpus.held_out.items()})
    if corpus.held_out:
        data["--split-seed"] = args.split_seed
    data.update({"--src-lang": args.src_lang, "--tgt-lang": args.tgt_lang, "--vocab": args.vocab})
    return {
        "recipe": "recipes/own_text/run.sh",
        "data": data,
        "model": {"--model": args.model, "--seed": args.seed, "-- flags": shlex.join(args.extra)},
        "files": {
            option: {"path": os.path.abspath(f.path), "lines": len(f.lines)}
            for option, f in corpus.inputs.items()
        },
        "sizes": {name: len(sources) for name, (sources, _) in corpus.splits.items()},
    }


def differences(then: dict, now: dict) -> List[str]:
    def show(value):
        if value is None or value == "":
            return "none"
        if isinstance(value, str) and re.fullmatch(r"[0-9a-f]{64}", value):
            return f"sha256 {value[:12]}"
        return repr(value) if isinstance(value, str) else str(value)

    keys = dict.fromkeys([*then, *now])
    return [
        f"{key} {show(then.get(key))} then, {show(now.get(key))} now"
        for key in keys
        if then.get(key) != now.get(key)
    ]


def recorded_run(out: str) -> Optional[dict]:
    """The run.json of ``out``; None for a directory that does not exist or is empty."""
    if not os.path.exists(out) or (os.path.isdir(out) and not os.listdir(out)):
        return None
    path = os.path.join(out, "run.json")
    if not os.path.isdir(out) or not os.path.isfile(path):
        raise InputError(
            f"--out {out} exists and is not a run of this recipe (no run.json in it): give a new "
            "or empty directory"
        )
    try:
        with open(path, encoding="utf-8") as f:
            run = json.load(f)
        if isinstance(run.get("data"), dict) and isinstance(run.get("model"), dict):
            return run
    except (OSError, ValueError, AttributeError):
        pass
    raise InputError(f"{path} cannot be read as this recipe's record: delete {out} to start over")


def prepare(args) -> Tuple[Corpus, dict, str]:
    """Check everything, then write DIR/raw and DIR/run.json (not with --dry-run).
    Returns the corpus, its record and what was done: new, same, or model (the model's
    settings changed before any checkpoint was written)."""
    out = os.path.abspath(args.out)
    then = recorded_run(out)
    corpus = parallel_text.read_corpus(args)
    now = record(args, corpus)
    state = "new"
    if then is not None:
        changed = differences(then["data"], now["data"])
        if changed:
            raise InputError(
                f"--out {args.out} holds a run on other data ({'; '.join(changed)}): give "
                f"another --out, or delete {args.out} to start over"
            )
        for name in SPLITS:
            for lang in (args.src_lang, args.tgt_lang):
                if not os.path.isfile(os.path.join(out, "raw", f"{name}.{lang}")):
                    missing = os.path.join(args.out, "raw", f"{name}.{lang}")
                    raise InputError(f"{missing} is missing: delete {args.out} to start over")
        changed = differences(then["model"], now["model"])
        trained = os.path.exists(os.path.join(out, "checkpoints", "checkpoint_last.pt"))
        if changed and trained:
            raise InputError(
                f"--out {args.out} holds a model trained with other settings "
                f"({'; '.join(changed)}): give another --out, or delete "
                f"{os.path.join(args.out, 'checkpoints')} to train again on the same data"
            )
        state = "model" if changed else "same"
    if args.dry_run:
        return corpus, now, state
    try:
        if state == "new":
            write_run(out, corpus, now, args.src_lang, args.tgt_lang)
        elif state == "model":
            write_json(os.path.join(out, "run.json"), now)
    except OSError as e:
        raise InputError(f"--out {args.out}: {e.strerror.lower()}")
    return corpus, now, state


def write_json(path: str, value: dict):
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
        f.write("\n")
    os.replace(path + ".tmp", path)


def write_run(out: str, corpus: Corpus, manifest: dict, src_lang: str, tgt_lang: str):
    """DIR/raw and DIR/run.json, built in a directory beside DIR and renamed to it in
    one step: DIR holds all of them or none."""
    parent, name = os.path.split(out)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=parent)
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would become DIR's
        os.mkdir(os.path.join(tmp, "raw"))
        for split_name, sides in corpus.splits.items():
            for lang, lines in zip((src_lang, tgt_lang), sides):
                path = os.path.join(tmp, "raw", f"{split_name}.{lang}")
                with open(path, "w", encoding="utf-8") as f:
                    f.write("".join(line + "\n" for line in lines))
        write_json(os.path.join(tmp, "run.json"), manifest)
        os.rename(tmp, out)  # replaces an empty DIR
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def shell_assignments(args, corpus: Corpus) -> str:
    """The checked settings as ``NAME=value`` lines, shell-quoted, for run.sh to eval."""
    values = {
        "OUT": os.path.abspath(args.out),
        "SRC_LANG": args.src_lang,
        "TGT_LANG": args.tgt_lang,
        "VOCAB": args.vocab,
        "MODEL": args.model,
        "ARCH": args.arch,
        "SEED": args.seed,
        "BEAM": args.beam,
        "LENPEN": args.lenpen,
        "MINUTES": "" if args.minutes is None else f"{args.minutes:g}",
        "STOP_TIME_HOURS": "" if args.minutes is None else repr(args.minutes / 60),
        "EPOCHS": "" if args.epochs is None else args.epochs,
        "DRY_RUN": int(args.dry_run),
    }
    values.update({f"N_{name.upper()}": len(s) for name, (s, _) in corpus.splits.items()})
    return "\n".join(f"{key}={shlex.quote(str(value))}" for key, value in values.items())


def main(argv=None):
    try:
        args = parallel_text.parse_options(sys.argv[1:] if argv is None else argv)
        corpus, manifest, state = prepare(args)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    for note in corpus.notes:
        print(note, file=sys.stderr)
    sizes = ", ".join(f"{n:,} {name}" for name, n in manifest["sizes"].items())
    held = " and ".join(corpus.held_out)
    how = f"; {held} held out with --split-seed {args.split_seed}" if held else ""
    done = {"new": "written", "same": "up to date", "model": "up to date; run.json's model updated"}
    where = "nothing written (--dry-run)" if args.dry_run else f"{done[state]}: {args.out}/raw"
    print(f"[data] {sizes} sentence pairs{how}; {where}", file=sys.stderr)
    print(shell_assignments(args, corpus))


if __name__ == "__main__":
    main()
