"""An attention explorer: one self-contained HTML page for a whole test set.

    luong-explore local-p=runs/demo/test.gen.txt lstm=runs/demo_lstm/test.gen.txt \\
        --reference data/bible_es_en/raw/test.en --path local-p=runs/demo/checkpoint_best.pt \\
        --data data/bible_es_en/bin --out explore.html
    luong-explore --path local-p=a.pt --path global=b.pt --data data-bin \\
        --source test.es --target test.en --spm-model spm.model --gold gold.talp --out x.html

Models are given as ``NAME=FILE`` (or ``FILE``, named by its directory):

- ``fairseq-generate --print-alignment soft`` output (without ``--post-process``),
  one file per model, all of the same test set: each model's hypothesis, its
  maps as printed, sentence BLEU and chrF against ``--reference`` (raw text, one
  line per sentence id; else the T- lines). A ``--path NAME=CHECKPOINT`` with the
  same NAME force-decodes that hypothesis instead: the same maps (to the printed
  6 decimals), with local windows' p_t, which fairseq-generate does not print.
  ``--fairseq-lstm NAME`` reads fairseq's ``lstm`` maps, printed in another order
  (below).
- ``--path NAME=CHECKPOINT`` alone: forced decoding of ``--source``/``--target``
  (or ``--gen-subset``), as ``luong-align``; with ``--gold`` (the formats
  ``luong-aer`` reads) the page shows gold sure/possible links and each
  sentence's AER.

fairseq's ``lstm`` attends over its source converted to right padding, and
fairseq-generate cuts each printed row at the left-padded columns of the batch:
a sentence with P padding columns in its batch prints the weights of its source
pieces P, P+1, ..., then P zeros, and the first P weights are lost. With
``--fairseq-lstm`` the rows are shifted back (P = the all-zero columns at the
end); for P = 1 the lost weight is 1 minus the row's sum, for P > 1 the first P
cells are shown as unknown. ``--path`` for that model gives its exact maps.

The page: a sentence list (sort by id, length, BLEU or chrF of a model, or the
difference between two models; filter by text) and, per sentence, every model's
matrix over words (pieces merged as ``luong-align`` merges them) or pieces,
hovered rows and columns highlighted, hard links (argmax, source EOS excluded),
gold links, local windows [p_t - D, p_t + D] and p_t. Weights are stored
rounded to 1/63, one character a cell, leading and trailing zeros of a row left
out (a local window keeps only its span).
"""

import argparse
import os
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

import numpy as np

from .aer import FORMATS, read_gold
from .aer import score as aer_score
from .explore_maps import (  # noqa: F401  (explore.encode_map etc.)
    ALPHABET,
    LEVELS,
    UNKNOWN,
    decode_map,
    encode_map,
    merge_words,
    piece_links,
    right_padded_rows,
)
from .forced import Pair, add_forced_args, force_decode, load_ensemble, read_pairs, window_size
from .generate_output import Translation, parse_generate
from .inputs import named, read_lines, tool_parser
from .words import (
    SCHEMES,
    detect_scheme,
    merge_positions,
    word_index,
    words,
)

# ---- one model's view of one sentence ---------------------------------------


@dataclass
class View:
    """One model on one sentence: target pieces (no EOS) and the T x S piece map
    (EOS last on both axes), p_t per target piece when the model has a window."""

    target: List[str]
    attention: np.ndarray
    centers: Optional[np.ndarray] = None
    text: str = ""  # the detokenised output (generate) or target (forced)


@dataclass
class Model:
    name: str
    views: Dict[int, View] = field(default_factory=dict)
    window: Optional[int] = None  # D
    kind: str = "generate"  # or "forced"
    note: str = ""


def sentence_record(sid, source, reference, models, scheme, gold=None, with_scores=True):
    """The page's data for one sentence: words, indices, every model's maps."""
    from sacrebleu.metrics import BLEU, CHRF

    src_index = word_index(source, scheme)
    record = {
        "id": sid,
        "src": source,
        "srcW": words(source, scheme),
        "srcI": src_index,
        "ref": reference,
        "out": [],
    }
    if gold is not None:
        record["gold"] = {
            "sure": sorted(map(list, gold[0])),
            "possible": sorted(map(list, gold[1] - gold[0])),
        }
    for model in models:
        view = model.views.get(sid)
        if view is None:
            record["out"].append(None)
            continue
        tgt_index = word_index(view.target, scheme)
        word_map = merge_words(view.attention, src_index, tgt_index)
        word_links = piece_links(word_map)
        out = {
            "tgt": view.target,
            "tgtW": words(view.target, scheme),
            "tgtI": tgt_index,
            "text": view.text,
            "P": encode_map(view.attention),
            "W": encode_map(word_map),
            "linkP": piece_links(view.attention),
            "linkW": word_links,
        }
        if with_scores and model.kind == "generate":
            bleu = BLEU(effective_order=True).sentence_score(view.text, [reference])
            out["bleu"] = round(bleu.score, 2)
            out["chrf"] = round(CHRF().sentence_score(view.text, [reference]).score, 2)
        if view.centers is not None and model.window is not None:
            D = model.window
            out["pt"] = [round(float(c), 2) for c in view.centers]
            on_words = merge_positions(view.centers, src_index, tgt_index)
            out["ptW"] = [round(float(c), 2) for c in on_words]
            lo = merge_positions(view.centers - D, src_index, tgt_index)
            hi = merge_positions(view.centers + D, src_index, tgt_index)
            out["winW"] = [[round(float(a), 2), round(float(b), 2)] for a, b in zip(lo, hi)]
        if gold is not None and model.kind == "forced":
            hyp = {(i, j) for j, i in enumerate(word_links) if i >= 0}
            out["aer"] = round(aer_score([hyp], [gold])["aer"], 4)
        record["out"].append(out)
    return record


# ---- reading the inputs -----------------------------------------------------


def detokenise(pieces: Sequence[str], scheme: str) -> str:
    return " ".join(words(pieces, scheme))


def read_generate(path: str, name: str, lstm: bool) -> Dict[int, Translation]:
    try:
        with open(path, encoding="utf-8") as f:
            rows = parse_generate(f.read())
    except OSError as e:
        raise ValueError(f"{name}={path}: {e.strerror}")
    rows = {i: row for i, row in rows.items() if row.hypothesis or row.attention is not None}
    if not rows:
        raise ValueError(f"{name}={path}: no fairseq-generate output (S-, H-, A- lines) in it")
    for i, row in rows.items():
        if row.attention is None:
            raise ValueError(
                f"{name}={path}: sentence {i} has no soft attention; run fairseq-generate "
                "with --print-alignment soft"
            )
        shape = (len(row.hypothesis.split()) + 1, len(row.source.split()) + 1)
        if np.shape(row.attention) != shape:
            raise ValueError(
                f"{name}={path}: sentence {i}'s attention is {np.shape(row.attention)}, expected "
                f"{shape} (hypothesis and source pieces + EOS): run fairseq-generate without "
                "--post-process, so that S- and H- are the model's pieces"
            )
        if lstm:
            row.attention = right_padded_rows(row.attention)
    return rows


def build(args) -> dict:
    """Everything the page embeds, from the parsed command line."""
    checkpoints = dict(named(spec, checkpoint_name) for spec in args.path or [])
    generated = [named(spec, generate_name) for spec in args.models]
    names = [name for name, _ in generated]
    if len(set(names)) != len(names):
        raise ValueError(f"two models named the same: {', '.join(names)} (name them NAME=FILE)")
    unknown_lstm = set(args.fairseq_lstm) - set(names)
    if unknown_lstm:
        raise ValueError(
            f"--fairseq-lstm {', '.join(sorted(unknown_lstm))}: expected one of the generate "
            f"outputs' names ({', '.join(names) or 'none given'})"
        )
    forced_names = [name for name in checkpoints if name not in names]
    if forced_names and generated:
        raise ValueError(
            f"--path {forced_names[0]}=...: no generate output of that name; give a checkpoint "
            "either for a generate output's NAME (its hypotheses are force-decoded) or, "
            "without generate outputs, for --source/--target"
        )
    if not generated and not checkpoints:
        raise ValueError("give generate outputs (NAME=FILE) or checkpoints (--path NAME=CKPT)")
    if checkpoints and not args.data:
        raise ValueError("--path needs --data (the directory with the model's dictionaries)")
    if args.gold and generated:
        raise ValueError(
            "--gold needs forced decoding of the references (--path with --source/--target or "
            "--gen-subset): gold links are about the reference, not a model's output"
        )
    if generated:
        return build_from_generate(args, generated, checkpoints)
    return build_from_checkpoints(args, checkpoints)


def generate_name(path: str) -> str:
    return os.path.basename(os.path.dirname(os.path.abspath(path))) or path


def checkpoint_name(path: str) -> str:
    return generate_name(path.split(":")[0])


def build_from_generate(args, generated, checkpoints) -> dict:
    outputs = {
        name: read_generate(path, name, name in args.fairseq_lstm) for name, path in generated
    }
    first_name, first = next(iter(outputs.items()))
    ids = sorted(first)
    for name, rows in outputs.items():
        if sorted(rows) != ids or any(rows[i].source != first[i].source for i in ids):
            raise ValueError(
                f"{name} and {first_name} are not decodes of the same test set (sentence ids "
                "or sources differ)"
            )
    scheme = resolve(
        args.subword,
        [first[i].source.split() for i in ids]
        + [r.hypothesis.split() for rows in outputs.values() for r in rows.values()],
    )
    if args.reference:
        lines = read_lines(args.reference, "--reference")
        if max(ids) >= len(lines):
            raise ValueError(
                f"--reference {args.reference}: {len(lines)} lines, but the outputs have "
                f"sentence id {max(ids)}"
            )
        references = {i: lines[i] for i in ids}
    else:
        references = {i: detokenise(first[i].reference.split(), scheme) for i in ids}
    models = []
    for name, rows in outputs.items():
        model = Model(
            name, note="fairseq lstm, printed maps re-ordered" if name in args.fairseq_lstm else ""
        )
        for i in ids:
            target = rows[i].hypothesis.split()
            model.views[i] = View(
                target, np.array(rows[i].attention, dtype=float), text=detokenise(target, scheme)
            )
        if name in checkpoints:
            sources = [first[i].source for i in ids]
            hypotheses = [rows[i].hypothesis for i in ids]
            forced = force(args, checkpoints[name], sources, hypotheses)
            model.window = forced.window
            model.note = (
                "maps and p_t" if forced.window else "maps"
            ) + " by forced decoding of its output"
            for i, f in zip(ids, forced.views):
                model.views[i].attention, model.views[i].centers = f.attention, f.centers
        models.append(model)
    records = [
        sentence_record(i, first[i].source.split(), references[i], models, scheme) for i in ids
    ]
    return page_data(models, records, scheme, gold=False)


@dataclass
class ForcedRun:
    views: List[View]
    window: Optional[int]
    pairs: List[Pair]


def force(args, path, sources=None, targets=None) -> ForcedRun:
    models, task = load_ensemble(path, args.data, args.source_lang, args.target_lang)
    local = argparse.Namespace(**vars(args))
    if sources is not None:
        local.spm_model = None  # generate outputs hold the model's pieces already
    pairs = read_pairs(local, task, sources, targets)
    sizes = {window_size(m) for m in models}
    views = [
        View(f.pair.target, f.attention, f.centers)
        for f in force_decode(models, task, pairs, args.batch_size, args.cpu)
    ]
    return ForcedRun(views, sizes.pop() if len(sizes) == 1 else None, pairs)


def build_from_checkpoints(args, checkpoints) -> dict:
    runs = {name: force(args, path) for name, path in checkpoints.items()}
    pairs = next(iter(runs.values())).pairs
    scheme = resolve(args.subword, [p.source + p.target for p in pairs])
    gold = None
    if args.gold:
        gold = read_gold(args.gold, args.gold_format, args.gold_base, args.reverse_gold)
        if len(gold) != len(pairs):
            raise ValueError(
                f"--gold {args.gold}: {len(gold)} sentences, but the input has {len(pairs)}"
            )
    models = []
    for name, run in runs.items():
        model = Model(name, window=run.window, kind="forced", note="forced decoding of the target")
        for i, view in enumerate(run.views):
            view.text = detokenise(view.target, scheme)
            model.views[i] = view
        models.append(model)
    records = [
        sentence_record(
            i,
            p.source,
            detokenise(p.target, scheme),
            models,
            scheme,
            gold=None if gold is None else gold[i],
            with_scores=False,
        )
        for i, p in enumerate(pairs)
    ]
    return page_data(models, records, scheme, gold=gold is not None)


def resolve(scheme: str, sentences) -> str:
    return detect_scheme(sentences) if scheme == "auto" else scheme


def page_data(models: List[Model], records: List[dict], scheme: str, gold: bool) -> dict:
    return {
        "models": [
            {"name": m.name, "kind": m.kind, "window": m.window, "note": m.note} for m in models
        ],
        "scheme": scheme,
        "gold": gold,
        "levels": LEVELS,
        "alphabet": ALPHABET,
        "sentences": records,
    }


def main(argv=None):
    from .explore_page import render

    parser = tool_parser(__doc__)
    parser.add_argument(
        "models",
        nargs="*",
        metavar="NAME=GENERATE_OUTPUT",
        help="fairseq-generate --print-alignment soft output, one per model",
    )
    parser.add_argument("--out", required=True, help="the HTML page to write")
    parser.add_argument(
        "--reference",
        help="raw reference text, one line per sentence id "
        "(default: the generate output's T- lines)",
    )
    parser.add_argument(
        "--fairseq-lstm",
        action="append",
        default=[],
        metavar="NAME",
        help="this generate output comes from fairseq's lstm (its maps are "
        "re-ordered; repeatable)",
    )
    parser.add_argument("--title", default="Attention explorer")
    add_forced_args(
        parser,
        required=False,
        path_action="append",
        path_help="NAME=CHECKPOINT (repeatable; NAME=a.pt:b.pt for an ensemble)",
    )
    group = parser.add_argument_group("gold alignments (with --path and --source/--target)")
    group.add_argument("--gold", help="gold links per sentence pair, as luong-aer reads them")
    group.add_argument("--gold-format", choices=FORMATS, default="auto")
    group.add_argument("--gold-base", type=int, choices=(0, 1), default=1)
    group.add_argument("--reverse-gold", action="store_true")
    args = parser.parse_intermixed_args(argv)  # NAME=FILE and options in any order
    if args.subword not in SCHEMES:
        parser.error(f"--subword {args.subword!r}: expected one of {', '.join(SCHEMES)}")
    try:
        data = build(args)
        size = render(data, args.out, args.title)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    print(f"{args.out} ({len(data['sentences'])} sentences, {size / 1e6:.1f} MB)", file=sys.stderr)
    print(args.out)


if __name__ == "__main__":
    main()
