"""An op-level micro-benchmark: the encoder's two ways through a batch of several source
lengths on a CPU (lstm_encoder.py), one LSTM call per length against one packed call.

    python bench/micro_encoder.py [--data DIR] [--threads 2] [--rounds 25] [--max-tokens 2000 4000]
                                  [--batches 200] [--json FILE]

The demo's model (1 x 256, global general attention with input feeding), built as
fairseq-train builds it, in fp32 and with ``--precision bf16`` (on a CPU with native
bf16). From the Bible's training batches as fairseq-train draws them (seed 1) at each
``--max-tokens`` (2000 and 4000), the first batch that holds k distinct source lengths, for
k = 1 .. ``LENGTH_GROUPS`` (4) where one exists among the first ``--batches`` (200). For
each: the encoder's forward and backward (its outputs and final states into a sum), with
``LENGTH_GROUPS`` 0 (packed) and at its default (by length), interleaved round by round;
the median of each and the median of the paired ratios. It also counts, over those
batches, how many hold each number of lengths.
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import measure  # noqa: E402
from systems import BF16, common_args  # noqa: E402
from throughput import build_system  # noqa: E402

MODEL = "global-general feed"
MAX_TOKENS = (2000, 4000)


def distinct_lengths(batch) -> int:
    return len(set(batch["net_input"]["src_lengths"].tolist()))


def encoder_pass(model, batch):
    """One call = the encoder's forward and backward on ``batch``."""
    model.train()
    net_input = batch["net_input"]

    def run():
        out = model.encoder(net_input["src_tokens"], net_input["src_lengths"])
        total = sum(out[k].float().sum() for k in ("encoder_out", "final_hiddens", "final_cells"))
        total.backward()

    return run


def with_groups(groups: int, job):
    from luong_plugin.modules import lstm_encoder

    def run():
        lstm_encoder.LENGTH_GROUPS = groups
        job()

    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--data",
        default=os.path.join(REPO, "data", "bible_es_en"),
        help="corpus directory of recipes/bible_es_en/prepare.sh",
    )
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--batches", type=int, default=200, help="batches looked at per --max-tokens")
    p.add_argument("--max-tokens", type=int, nargs="+", default=list(MAX_TOKENS))
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    args = p.parse_args(argv)
    for name in ("threads", "rounds", "batches"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be a positive integer")
    if min(args.max_tokens) < 1:
        p.error("--max-tokens must be positive integers")
    bin_dir = os.path.join(args.data, "bin")
    if not os.path.exists(os.path.join(bin_dir, "dict.en.txt")):
        p.error(f"--data {args.data}: no binarised corpus in it (recipes/bible_es_en/prepare.sh)")
    import torch

    from luong_plugin.modules import lstm_encoder
    from luong_plugin.modules.precision import cpu_has_native_bf16

    torch.set_num_threads(args.threads)
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    names = [MODEL] + ([MODEL + BF16] if cpu_has_native_bf16() else [])
    results = {"started": started, "commit": measure.commit(REPO, ["luong_plugin", "bench"]),
               "machine": {**measure.cpu(), "threads": args.threads}, "rounds": args.rounds,
               "groups": lstm_encoder.LENGTH_GROUPS, "batches": args.batches, "counts": {},
               "rows": []}  # fmt: skip
    for max_tokens in args.max_tokens:
        common = common_args(bin_dir, 0.0, "label_smoothed_cross_entropy", max_tokens)
        built = {name: build_system(name, common) for name in names}
        batches = measure.train_batches(built[MODEL][1], max_tokens, args.batches)
        counts = [distinct_lengths(b) for b in batches]
        results["counts"][max_tokens] = {k: counts.count(k) for k in sorted(set(counts))}
        for k in range(1, results["groups"] + 1):
            if k not in counts:
                continue
            batch = batches[counts.index(k)]
            jobs = {}
            for name in names:
                job = encoder_pass(built[name][2], batch)
                jobs[(name, "packed")] = with_groups(0, job)
                jobs[(name, "by length")] = with_groups(results["groups"], job)
            seconds, raw = measure.median_rounds(jobs, args.rounds, warmup=2)
            for name in names:
                packed, by_length = raw[(name, "packed")], raw[(name, "by length")]
                results["rows"].append({
                    "max_tokens": max_tokens, "lengths": k, "system": name,
                    "sentences": batch["net_input"]["src_tokens"].size(0),
                    "width": batch["net_input"]["src_tokens"].size(1),
                    "packed_ms": seconds[(name, "packed")] * 1e3,
                    "by_length_ms": seconds[(name, "by length")] * 1e3,
                    "paired": statistics.median(a / b for a, b in zip(packed, by_length)),
                })  # fmt: skip
        lstm_encoder.LENGTH_GROUPS = results["groups"]
    print(markdown(results))
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def markdown(r: dict) -> str:
    m = r["machine"]
    lines = [
        f"{r['started']}, commit {r['commit']}, {m['cpu']}, {m['cpus']} CPUs (bf16: "
        f"{m['cpu_bf16']}), {m['threads']} threads; median of {r['rounds']} interleaved rounds",
        "",
        "| --max-tokens | source lengths | sentences x width | system | packed ms | by length ms "
        "| packed / by length (paired) |",
        "|---:|---:|---|---|---:|---:|---:|",
    ]
    for row in r["rows"]:
        lines.append(
            f"| {row['max_tokens']} | {row['lengths']} | {row['sentences']} x {row['width']} | "
            f"{row['system']} | {row['packed_ms']:.1f} | {row['by_length_ms']:.1f} | "
            f"{row['paired']:.2f}x |"
        )
    lines += ["", f"Batches by their number of distinct source lengths (first {r['batches']}):"]
    for max_tokens, counts in r["counts"].items():
        lines.append(f"- --max-tokens {max_tokens}: " + ", ".join(
            f"{n} with {k}" for k, n in counts.items()))  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
