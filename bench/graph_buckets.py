"""How much of a corpus `--cuda-graphs` trains graphed: fairseq's batches of a binarized
training set, each put in its bucket as ``DecoderGraphs.bucket`` does (sentences, source
and target length rounded up to ``--cuda-graph-step``), and the buckets that get a graph
under ``--cuda-graph-limit`` (the first ones met, in the order fairseq's epochs shuffle the
batches). Per epoch: the share of target tokens whose batch replays a graph (the rest train
on the plain path), and the padded target positions the graphed batches compute per real
one. No model runs: this is the batches' arithmetic, on a CPU.

    python bench/graph_buckets.py --data data/bible_es_en/bin --src es --tgt en \\
        --batch-size 128 --max-len 50 --out docs/experiments/graph_buckets/bible_es_en.json

Batching as fairseq-train does it with its defaults for translation: indices shuffled with
the seed, sorted by target and then source length (``LanguagePairDataset.ordered_indices``),
pairs over ``--max-len`` on either side dropped (``--max-source-positions`` /
``--max-target-positions``), then ``batch_by_size`` on the longer side; each epoch shuffles
the list of batches with seed + epoch. Lengths count the end-of-sentence token, as the
binarized sizes do.
"""

import argparse
import json
import os
import sys
from typing import List, Optional, Sequence, Tuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from luong_plugin.modules.cuda_graphs import padded_shape  # noqa: E402

Batch = Tuple[int, int, int, int]  # sentences, longest source, longest target, target tokens


def batches(src: np.ndarray, tgt: np.ndarray, batch_size: Optional[int], max_tokens=None,
            max_len: Optional[int] = None, seed: int = 1) -> List[Batch]:  # fmt: skip
    """fairseq's batches of pairs with these source and target lengths."""
    from fairseq.data import data_utils

    order = np.random.RandomState(seed).permutation(len(src))
    order = order[np.argsort(tgt[order], kind="mergesort")]
    order = order[np.argsort(src[order], kind="mergesort")]
    if max_len:
        order = order[(src[order] <= max_len) & (tgt[order] <= max_len)]
    longer = np.maximum(src, tgt)
    found = data_utils.batch_by_size(order, lambda i: longer[i], max_tokens=max_tokens,
                                     max_sentences=batch_size)  # fmt: skip
    return [(len(b), int(src[b].max()), int(tgt[b].max()), int(tgt[b].sum())) for b in found]


def bucket(batch: Batch, step: int) -> Tuple[int, int, int]:
    """The decoder's bucket of ``batch`` (no location score: the source is not capped)."""
    b, s, t, _ = batch
    return padded_shape(b, s, t, step)


def coverage(found: Sequence[Batch], step: int, limit: int, epochs: int = 3, seed: int = 1):
    """Per epoch (share of target tokens graphed, padded target positions per real one in
    the graphed batches), the first ``limit`` buckets met getting a graph."""
    graphed = set()
    rows = []
    for epoch in range(1, epochs + 1):
        tokens = graphed_tokens = padded = real = 0
        for k in np.random.RandomState(seed + epoch).permutation(len(found)):
            batch = found[k]
            key = bucket(batch, step)
            if key not in graphed and len(graphed) < limit:
                graphed.add(key)
            tokens += batch[3]
            if key in graphed:
                graphed_tokens += batch[3]
                padded += key[0] * key[2]
                real += batch[0] * batch[2]
        rows.append({"epoch": epoch, "graphed_share": round(graphed_tokens / tokens, 4),
                     "padding": round(padded / real, 4) if real else None})  # fmt: skip
    return rows


def sizes(prefix: str) -> np.ndarray:
    from fairseq.data import indexed_dataset

    dataset = indexed_dataset.make_dataset(prefix, impl="mmap")
    if dataset is None:
        raise SystemExit(f"error: --data: no binarized {prefix}.idx/.bin")
    return np.array(dataset.sizes, dtype=np.int64, copy=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="fairseq-preprocess's output directory")
    p.add_argument("--src", required=True)
    p.add_argument("--tgt", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--batch-size", type=int, default=None, help="sentences a batch")
    p.add_argument("--max-tokens", type=int, default=None)
    p.add_argument("--max-len", type=int, default=None, help="drop longer pairs (tokens)")
    p.add_argument("--steps", type=int, nargs="+", default=[8, 16])
    p.add_argument("--limits", type=int, nargs="+", default=[16, 32])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", help="a JSON file for the table")
    args = p.parse_args(argv)
    if not args.batch_size and not args.max_tokens:
        p.error("give --batch-size or --max-tokens (or both), as to fairseq-train")
    if min(args.steps + args.limits) < 1:
        p.error("--steps and --limits must be 1 or more")
    prefix = os.path.join(args.data, f"{args.split}.{args.src}-{args.tgt}")
    src, tgt = sizes(f"{prefix}.{args.src}"), sizes(f"{prefix}.{args.tgt}")
    found = batches(src, tgt, args.batch_size, args.max_tokens, args.max_len, args.seed)
    rows = []
    for step in args.steps:
        shapes = len({bucket(b, step) for b in found})
        for limit in args.limits:
            per_epoch = coverage(found, step, limit, args.epochs, args.seed)
            rows.append({"step": step, "limit": limit, "buckets": shapes, "epochs": per_epoch})
            last = per_epoch[-1]
            print(f"step {step:3d} limit {limit:3d}: {shapes} buckets; graphed "
                  f"{last['graphed_share']:.1%} of target tokens, padding {last['padding']}")  # fmt: skip
    result = {"data": args.data, "split": args.split, "src": args.src, "tgt": args.tgt,
              "batch_size": args.batch_size, "max_tokens": args.max_tokens,
              "max_len": args.max_len, "seed": args.seed, "batches": len(found),
              "rows": rows}  # fmt: skip
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
