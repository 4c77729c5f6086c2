"""Score a test set decoded by fairseq-generate and show what the model does.

    python -m luong_plugin.analysis.report GEN_OUTPUT --reference test.en --out-dir DIR

Prints sacreBLEU and chrF with their signatures (detokenised output against the
raw reference), a few sample translations, and the path of an attention heatmap;
writes DIR/test.hyp (one detokenised hypothesis per reference line) and
DIR/report.json (the scores, their signatures, BLEU's length ratio, brevity penalty and
n-gram precisions, the training summary, and with ``--lenpen`` the length penalty the test
split was decoded with).
"""

import argparse
import json
import os
import re

from .generate_output import decode_pieces, parse_generate
from .heatmap import plot_attention


def score(hypotheses, references):
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(), CHRF()
    return (
        (bleu.corpus_score(hypotheses, [references]), bleu.get_signature()),
        (chrf.corpus_score(hypotheses, [references]), chrf.get_signature()),
    )


def bleu_lengths(bleu) -> dict:
    """What a sacreBLEU score owes to length: the hypothesis' tokens over the reference's, the
    brevity penalty (1 from a ratio of 1 up, exp(1 - 1 / ratio) below) and the 1- to 4-gram
    precisions (%), the score being their geometric mean times the penalty."""
    return {
        "length_ratio": round(bleu.sys_len / bleu.ref_len, 3) if bleu.ref_len else None,
        "brevity_penalty": round(bleu.bp, 3),
        "bleu_precisions": [round(p, 1) for p in bleu.precisions],
    }


def hypotheses(rows, references) -> list:
    """One detokenised hypothesis per reference line, from parse_generate's rows; a
    ValueError naming the ids that have none."""
    missing = [i for i in range(len(references)) if i not in rows]
    if missing:
        raise ValueError(
            f"{len(missing)} of {len(references)} reference lines have no hypothesis "
            f"(first ids {missing[:5]}); was --required-batch-size-multiple 1 passed?"
        )
    return [decode_pieces(rows[i].hypothesis) for i in range(len(references))]


VALIDATION = re.compile(r"\| valid \|.*?\| loss ([0-9.]+) .*?\| ppl ([0-9.]+) .*?num_updates (\d+)")


def training_summary(path):
    """Wall time, updates and valid perplexity from a fairseq-train log: ``valid_ppl``,
    the lowest of every validation, and ``best_checkpoint``, the validation that
    checkpoint_best.pt holds (update, loss, ppl). fairseq keeps the checkpoint of the
    lowest valid *loss* (label-smoothed under that criterion; a later equal loss
    replaces it) and the perplexity comes from the unsmoothed nll, so the two can name
    different validations."""
    if not path or not os.path.exists(path):
        return None
    text = open(path, encoding="utf-8").read()
    validations = [(float(loss), float(ppl), int(update))
                   for loss, ppl, update in VALIDATION.findall(text)]  # fmt: skip
    wall = re.findall(r"\| wall (\d+)", text)
    updates = re.findall(r"num_updates[ =](\d+)", text)
    best = None
    for loss, ppl, update in validations:
        if best is None or loss <= best["valid_loss"]:
            best = {"update": update, "valid_loss": loss, "valid_ppl": ppl}
    return {
        "valid_ppl": min(ppl for _, ppl, _ in validations) if validations else None,
        "best_checkpoint": best,
        "wall_s": int(wall[-1]) if wall else None,
        "updates": int(updates[-1]) if updates else None,
    }


def pick_example(rows, lo=8, hi=16):
    """A sentence of moderate length for the heatmap (deterministic); None when no row
    has attention weights (decoded without ``--print-alignment soft``)."""
    for i in sorted(rows):
        if rows[i].attention is not None and lo <= len(rows[i].hypothesis.split()) <= hi:
            return i
    return min((i for i in rows if rows[i].attention is not None), default=None)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("generate_output")
    parser.add_argument("--reference", required=True, help="raw reference, one line per id")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--train-log", default=None)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--lenpen", type=float, default=None,
                        help="the --lenpen the output was decoded with, to record")  # fmt: skip
    args = parser.parse_args(argv)

    rows = parse_generate(open(args.generate_output, encoding="utf-8").read())
    references = open(args.reference, encoding="utf-8").read().splitlines()
    try:
        detokenised = hypotheses(rows, references)
    except ValueError as error:
        parser.error(str(error))
    os.makedirs(args.out_dir, exist_ok=True)
    with open(os.path.join(args.out_dir, "test.hyp"), "w", encoding="utf-8") as f:
        f.write("\n".join(detokenised) + "\n")

    (bleu, bleu_sig), (chrf, chrf_sig) = score(detokenised, references)
    summary = training_summary(args.train_log)
    print(f"test sentences: {len(references)}")
    if summary:
        print(
            "training: {updates} updates in {wall_s} s, best valid perplexity {valid_ppl}".format(
                **summary
            )
        )
        best = summary["best_checkpoint"]
        if best is not None:
            print(f"checkpoint_best.pt holds update {best['update']}: valid loss "
                  f"{best['valid_loss']}, perplexity {best['valid_ppl']}")  # fmt: skip
    if args.lenpen is not None:
        print(f"decoded with --lenpen {args.lenpen:g}")
    print(f"sacreBLEU {bleu.score:.2f}  ({bleu_sig})")
    print(f"chrF2     {chrf.score:.2f}  ({chrf_sig})")
    lengths = bleu_lengths(bleu)
    print(
        "BLEU's length ratio {length_ratio} (hypothesis / reference tokens), brevity penalty "
        "{brevity_penalty}, n-gram precisions {bleu_precisions}".format(**lengths)
    )
    with open(os.path.join(args.out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(
            {
                "sentences": len(references),
                "bleu": round(bleu.score, 2),
                "bleu_signature": str(bleu_sig),
                "chrf": round(chrf.score, 2),
                "chrf_signature": str(chrf_sig),
                **lengths,
                "training": summary,
                "lenpen": args.lenpen,
            },
            f,
            indent=1,
        )
    step = max(1, len(references) // max(1, args.samples))
    for i in list(range(0, len(references), step))[: args.samples]:
        print(f"\n[{i}] source:    {decode_pieces(rows[i].source)}")
        print(f"[{i}] reference: {references[i]}")
        print(f"[{i}] output:    {detokenised[i]}")

    example = pick_example(rows)
    if example is None:
        print("\nno attention heatmap: decode with --print-alignment soft for one")
        return
    row = rows[example]
    png = plot_attention(
        row.attention,
        row.source.split() + ["</s>"],
        row.hypothesis.split() + ["</s>"],
        os.path.join(args.out_dir, f"attention_{example}.png"),
        title=f"test sentence {example}",
    )
    print(f"\nattention heatmap: {png}")


if __name__ == "__main__":
    main()
