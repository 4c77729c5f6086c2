"""Local-p and local-m against global attention by source length, through fairseq's interfaces.

    python bench/by_length.py [--lengths 10 20 40 80 160] [--rounds 5] [--out FILE.json]
    python bench/by_length.py --quick          # a smoke test (seconds)

make demo's two models, ``luong_recommended`` (local-p, D = 14) and
``luong_recommended_global``, and local-m with the same window (D = 14), built as
fairseq-train builds them (the Bible corpus' dictionary; ``--precision`` as
``default_precision`` picks), on synthetic batches whose sources all have ``L`` pieces and
whose targets have ``L`` pieces too, for each ``L``:

- training: target tokens/s of an update (forward, backward, clip, Adam) through the
  criterion, as fairseq's trainer calls it (a step's attention is the fused node of
  attention_step.py, which gathers a local window's keys and values from
  ``attention_step.GATHER_FROM`` windows of source on); local-p also with one setting changed
  (``--variants``): the node scoring every position at every length (``local-p fused
  scored``, as before the gathered form) or gathering from one window of source on
  (``local-p fused gathered``), both by default; the plain path, without the fused node,
  gathering from one window on (``local-p gathered``); eq. (9)'s products in the loop's
  product dtype instead of fp32 (``local-p eq9 bf16``: bf16 under ``--precision bf16``, as
  they ran on a CPU before ``luong_loop.POSITION_FP32_ON_CPU``);
- decoding: beam-5 sentences/s of fairseq's SequenceGenerator with every hypothesis
  forced to ``L`` tokens (``min_len`` = ``max_len``), so every model decodes as many steps.

The models are interleaved round by round on the same batches; the table gives global's
medians and each other's ratio to them. The window covers 2D + 1 = 29 pieces, so it can
only save work on sources longer than that; the crossover is where a ratio reaches 1.00.
Local-m shares local-p's window but has no eq. (9) position network or eq. (10)
Gaussian: local-p / local-m is what those cost. Prints a table, and writes the numbers
as JSON with ``--out``.
"""

import argparse
import copy
import json
import os
import sys
import time
from importlib import import_module

import measure
from systems import build, common_args

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
USER_DIR = os.path.join(REPO, "luong_plugin")
# name: fairseq-train's model options. local-m has local-p's window (D = 14) without
# eq. (9)'s position network and eq. (10)'s Gaussian: local-p / local-m is their cost,
# local-m / global what the window itself saves or costs.
MODELS = {
    "local-p": ["--arch", "luong_recommended"],
    "local-m": ["--arch", "luong_recommended_global", "--attention-window", "local-m",
                "--window-size", "14"],
    "global": ["--arch", "luong_recommended_global"],
}  # fmt: skip
LOCAL = ("local-p", "local-m")  # each timed against global


def with_settings(update, *settings):
    """``update`` run with each (module, name, value) of ``settings`` set, the module
    attributes restored after each call."""

    def run():
        kept = [(module, name, getattr(module, name)) for module, name, _ in settings]
        for module, name, value in settings:
            setattr(module, name, value)
        try:
            return update()
        finally:
            for module, name, value in kept:
                setattr(module, name, value)

    return run


def module_setting(module: str, name: str, value):
    """``update`` -> ``update`` run with ``luong_plugin.modules.<module>.<name>`` = ``value``."""

    def wrap(update):
        return with_settings(update, (import_module(f"luong_plugin.modules.{module}"), name, value))

    return wrap


def plain_gathering(update):
    """``update`` run on the plain path (the loop's ``step_source`` gives no fused step)
    with attention.TRAIN_GATHER_FROM = 1: the window gathered from one window of source on."""
    from luong_plugin.modules import attention, luong_loop

    return with_settings(update, (attention, "TRAIN_GATHER_FROM", 1),
                         (luong_loop, "step_source", lambda *args: None))  # fmt: skip


# local-p's update again with one setting changed (``--variants``): the fused step scoring
# every position at every length, or gathering the window from one window of source on,
# where it gathers from attention_step.GATHER_FROM windows; the plain path (no fused step)
# gathering from one window on; eq. (9)'s products in the loop's product dtype (bf16 under
# --precision bf16), as before they ran in fp32 on a CPU (luong_loop.POSITION_FP32_ON_CPU)
VARIANTS = {  # --variants name: (row, the setting)
    "scored": (
        "local-p fused scored",
        module_setting("attention_step", "GATHER_FROM", sys.maxsize),
    ),
    "gathered": ("local-p fused gathered", module_setting("attention_step", "GATHER_FROM", 1)),
    "plain-gathered": ("local-p gathered", plain_gathering),
    "eq9-bf16": ("local-p eq9 bf16", module_setting("luong_loop", "POSITION_FP32_ON_CPU", False)),
}


def languages(data: str):
    """(source, target) of a binarised corpus, from its ``train.SRC-TGT.SRC.idx``."""
    for name in sorted(os.listdir(data)):
        parts = name.split(".")
        if len(parts) == 4 and parts[0] == "train" and parts[3] == "idx" and "-" in parts[1]:
            src, tgt = parts[1].split("-", 1)
            return src, tgt
    raise SystemExit(
        f"error: --data {data}: no train.SRC-TGT.*.idx in it (fairseq-preprocess's output)"
    )


def synthetic_batch(dictionary, batch: int, length: int, seed: int) -> dict:
    """A batch as fairseq's translation task hands it over: left-padded sources (none
    padded here: every source has ``length`` pieces, </s> last), targets of ``length``
    pieces, </s> last, and prev_output_tokens starting with </s>."""
    import torch

    g = torch.Generator().manual_seed(seed)
    low, high = dictionary.nspecial, len(dictionary)
    eos = torch.full((batch, 1), dictionary.eos())  # B x 1
    src = torch.cat(
        [torch.randint(low, high, (batch, length - 1), generator=g), eos], dim=1
    )  # B x L
    tgt = torch.cat(
        [torch.randint(low, high, (batch, length - 1), generator=g), eos], dim=1
    )  # B x L
    prev = torch.cat([eos, tgt[:, :-1]], dim=1)  # B x L: </s> y_1 .. y_{L-1}
    return {
        "id": torch.arange(batch),
        "nsentences": batch,
        "ntokens": batch * length,
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.full((batch,), length),
            "prev_output_tokens": prev,
        },
        "target": tgt,
    }


def make_forced_generate(model, tgt_dict, batches, beam: int, length: int):
    """Beam search with every hypothesis ``length`` tokens long (</s> included)."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    model = copy.deepcopy(model).eval()  # the training copy must stay trainable
    model.make_generation_fast_()
    generator = SequenceGenerator([model], tgt_dict, beam_size=beam, max_len_a=0,
                                  max_len_b=length - 1, min_len=length - 1)  # fmt: skip

    def run():
        with torch.no_grad():
            for sample in batches:
                hypos = generator.generate([model], sample)
                assert all(len(h[0]["tokens"]) == length for h in hypos)

    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=os.path.join(REPO, "data", "bible_es_en", "bin"),
                   help="a binarised corpus, for its dictionary (make demo's by default)")  # fmt: skip
    p.add_argument("--lengths", nargs="+", type=int, default=[10, 20, 40, 80, 160])
    p.add_argument("--tokens", type=int, default=2000, help="target tokens per batch")
    p.add_argument("--decode-sentences", type=int, default=16)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--precision", default=None, help="default: default_precision()")
    p.add_argument("--variants", nargs="*", default=["scored", "gathered"], choices=list(VARIANTS),
                   help="local-p's update again with one setting changed (VARIANTS)")  # fmt: skip
    p.add_argument("--no-beam", dest="beam", action="store_false",
                   help="time training alone (no beam-5 decoding)")  # fmt: skip
    p.add_argument("--quick", action="store_true", help="two short lengths, one round")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    variants = [VARIANTS[name][0] for name in args.variants]  # their rows
    ratios = (*LOCAL, *variants)  # the training rows given as ratios to global
    if args.quick:
        args.lengths, args.rounds, args.tokens, args.decode_sentences = [8, 40], 1, 160, 2
    if min(args.lengths) < 2 or args.rounds < 1 or args.tokens < 1:
        p.error("--lengths must be >= 2, --rounds and --tokens >= 1")
    if not os.path.isdir(args.data):
        p.error(f"--data {args.data}: no such folder (recipes/bible_es_en/prepare.sh makes it)")

    import torch

    from luong_plugin.modules.precision import default_precision

    torch.set_num_threads(args.threads)
    precision = args.precision or default_precision()
    common = common_args(args.data, 0.2, "label_smoothed_cross_entropy", args.tokens)
    src, tgt = languages(args.data)
    common[common.index("--source-lang") + 1] = src
    common[common.index("--target-lang") + 1] = tgt
    built = {}
    for name, options in MODELS.items():
        torch.manual_seed(1)
        margs, task, model, criterion = build([*options, "--precision", precision], common,
                                              USER_DIR, sizes=[])  # fmt: skip
        built[name] = (task, model, criterion)
    tgt_dict = built["global"][0].target_dictionary
    rows = []
    started = time.time()
    for length in args.lengths:
        batch = max(1, args.tokens // length)
        train = [synthetic_batch(tgt_dict, batch, length, seed=length)]
        decode = [synthetic_batch(tgt_dict, args.decode_sentences, length, seed=length + 1)]
        jobs = {f"{name} train": measure.make_update(model, criterion, train)
                for name, (_, model, criterion) in built.items()}  # fmt: skip
        _, model, criterion = built["local-p"]
        for name in args.variants:
            row, setting = VARIANTS[name]
            jobs[f"{row} train"] = setting(measure.make_update(model, criterion, train))
        if args.beam:
            jobs.update({f"{name} beam": make_forced_generate(model, tgt_dict, decode, 5, length)
                         for name, (_, model, _) in built.items()})  # fmt: skip
        seconds, _ = measure.median_rounds(jobs, args.rounds)
        row = {"length": length, "batch": batch}
        for name in (*MODELS, *variants):
            row[f"{name} train tok/s"] = batch * length / seconds[f"{name} train"]
            if name in MODELS and args.beam:
                row[f"{name} beam sent/s"] = args.decode_sentences / seconds[f"{name} beam"]
        for name in ratios:
            row[f"{name} train ratio"] = row[f"{name} train tok/s"] / row["global train tok/s"]
            if name in LOCAL and args.beam:
                row[f"{name} beam ratio"] = row[f"{name} beam sent/s"] / row["global beam sent/s"]
        rows.append(row)
        said = ", ".join(f"{name} {row[f'{name} train ratio']:.2f}x" for name in ratios)
        if args.beam:
            said += "; beam " + ", ".join(f"{n} {row[f'{n} beam ratio']:.2f}x" for n in LOCAL)
        print(f"L = {length}: training {said}", file=sys.stderr, flush=True)
    lines = [
        f"local-p and local-m (D = 14) against global, {precision}, {args.threads} threads, "
        f"{args.rounds} rounds, {(time.time() - started) / 60:.1f} min; ratios to global",
        "",
        "| source = target pieces | batch | training tok/s, global | local-p | local-m "
        + "".join(f"| {name} " for name in variants)
        + ("| beam-5 sent/s, global | local-p | local-m |" if args.beam else "|"),
        "|---" * (5 + len(variants) + 3 * args.beam) + "|",
    ]
    for r in rows:
        lines.append(
            f"| {r['length']} | {r['batch']} | {r['global train tok/s']:,.0f} | "
            + " | ".join(f"{r[f'{n} train ratio']:.2f}x" for n in ratios)
            + (f" | {r['global beam sent/s']:.1f} | " if args.beam else "")
            + (" | ".join(f"{r[f'{n} beam ratio']:.2f}x" for n in LOCAL) if args.beam else "")
            + " |"
        )
    print("\n".join(lines))
    if args.out:
        machine = measure.cpu()
        bf16 = machine["cpu_bf16"]
        bf16 = "no bf16 instructions" if bf16 == "none" else bf16.replace(" ", ", ")
        meta = {"commit": measure.commit(REPO, ["luong_plugin", "bench"]),
                "cpu": f"{machine['cpu']} ({bf16})",
                "precision": precision, "threads": args.threads, "rounds": args.rounds,
                "tokens": args.tokens, "beam": args.beam, "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(started))}  # fmt: skip
        with open(args.out, "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
