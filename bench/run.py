"""Benchmarks of luong_plugin against fairseq's own ``lstm``, in one process.

    python bench/run.py                 # the full run, writes docs/BENCHMARKS.md
    python bench/run.py --quick --out /tmp/b.md --data DIR   # a smoke test (seconds)
    python bench/run.py --render-only --json FILE              # the page again from a run's JSON

Measures, with every system interleaved round by round on the same batches:
training target tokens/s (and the ratio to fairseq ``lstm``), beam-5 generation
sentences/s, peak memory (a fresh process per system), attention step time
against the source length, model FLOPs against the measured fp32 GEMM peak, an
operator profile of one update, and bf16 mixed precision against fp32 (bf16.py,
which also runs alone: ``python bench/bf16_alone.py``). Prepares the Bible corpus when ``--data``
has none (recipes/bible_es_en/prepare.sh, 8K joint SentencePiece vocabulary).

The sections: throughput.py (training and generation through fairseq),
micro_attention.py (an op-level micro-benchmark), bf16.py; the
measurements: measure.py; the report: report.py, its targets checked in verdicts.py.
Alone, not part of this run: micro_position_step.py, local-p's extra cost per training step
against global attention's, piece by piece (docs/LOCAL_P.md).
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import bf16  # noqa: E402
import measure  # noqa: E402
import micro_attention  # noqa: E402
import report  # noqa: E402
from systems import (  # noqa: E402
    FAIRSEQ_LSTM,
    FUSED,
    PAPER_SIZES,
    QUICK_SYSTEMS,
    REFERENCE,
    SYSTEMS,
    common_args,
    system,
)
from throughput import build_system, decoder_path, generation, training  # noqa: E402

GENERATION_SYSTEMS = [REFERENCE, "global-general feed", "global-general", "local-p general feed"]
# the allocator's effect: trained in a child process started without tcmalloc
MALLOC_SYSTEMS = [
    REFERENCE,
    REFERENCE + FUSED,
    "global-general feed",
    "global-general feed" + FUSED,
]
MEMORY_SYSTEMS = GENERATION_SYSTEMS[:2] + ["global-general feed" + FUSED] + GENERATION_SYSTEMS[2:]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--data",
        default=os.path.join(REPO, "data", "bible_es_en"),
        help="corpus directory of recipes/bible_es_en/prepare.sh (made if missing)",
    )
    p.add_argument("--out", default=os.path.join(REPO, "docs", "BENCHMARKS.md"))
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument(
        "--quick", action="store_true", help="smallest sizes: a smoke test, not a measurement"
    )
    p.add_argument(
        "--rounds", type=int, default=None, help="interleaved rounds (default 5; quick 1)"
    )
    p.add_argument(
        "--max-tokens", type=int, default=None, help="batch size (default 4000; quick 400)"
    )
    p.add_argument("--json", default=None, help="also write the raw results as JSON here")
    p.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: write --out from the results in --json (a run's own JSON)",
    )
    p.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--malloc-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads < 1:
        p.error(f"--threads must be a positive integer, got {args.threads}")
    if args.render_only and not args.json:
        p.error("--render-only needs --json FILE: the results of a run to render")
    if args.render_only and not os.path.isfile(args.json):
        p.error(f"--json {args.json}: no such file (--render-only renders a run's results)")
    if args.rounds is not None and args.rounds < 1:
        p.error(f"--rounds must be a positive integer, got {args.rounds}")
    args.rounds = args.rounds or (1 if args.quick else 5)
    args.max_tokens = args.max_tokens or (400 if args.quick else 4000)
    return args


def ensure_data(data: str) -> str:
    bin_dir = os.path.join(data, "bin")
    if not os.path.exists(os.path.join(bin_dir, "train.es-en.en.idx")):
        print(f"[bench] preparing the corpus in {data}", flush=True)
        subprocess.run(
            ["bash", os.path.join(REPO, "recipes", "bible_es_en", "prepare.sh"), "--out", data],
            check=True,
        )
    return bin_dir


def batches_per_round(args) -> int:
    """Training batches per system per round (the main table and the allocator child)."""
    return 1 if args.quick else 3


def log(message: str):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


def malloc_child(args):
    """In a fresh process, started without tcmalloc: training tok/s of MALLOC_SYSTEMS."""
    import torch

    torch.set_num_threads(args.threads)
    bin_dir = ensure_data(args.data)
    train, _, _, _ = training(
        args, bin_dir, MALLOC_SYSTEMS, 0.0, "label_smoothed_cross_entropy", batches_per_round(args)
    )
    print(json.dumps({"allocator": measure.allocator(os.environ), "train": train}))


def memory_child(args):
    """In a fresh process: peak RSS while training one system (run.py --memory-child)."""
    import torch

    torch.set_num_threads(args.threads)
    bin_dir = ensure_data(args.data)
    common = common_args(bin_dir, 0.0, "label_smoothed_cross_entropy", args.max_tokens)
    _, task, model, criterion = build_system(args.memory_child, common)
    batches = measure.train_batches(task, args.max_tokens, 2, skip=1)
    before = measure.rss_bytes()
    measure.make_update(model, criterion, batches)()
    print(json.dumps({"rss_before": before, "peak": measure.peak_rss_bytes()}))


def machine(threads: int) -> dict:
    import fairseq
    import torch

    return {
        **measure.cpu(),
        "threads": threads,
        "torch": torch.__version__,
        "fairseq": fairseq.__version__,
        "python": platform.python_version(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def write_page(results: dict, out: str) -> None:
    """Write the report to ``out``, keeping the GPU section of the page there (bench/gpu.py's)."""
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    old = ""
    if os.path.exists(out):
        with open(out) as f:
            old = f.read()
    with open(out, "w") as f:
        f.write(report.page(results, old))


def main(argv=None):
    args = parse_args(argv)
    if args.memory_child:
        return memory_child(args)
    if args.malloc_child:
        return malloc_child(args)
    if args.render_only:
        with open(args.json) as f:
            results = report.from_json(json.load(f))
        write_page(results, args.out)
        print(f"[bench] wrote {args.out} from {args.json}")
        return

    import torch

    torch.set_num_threads(args.threads)
    started = time.time()
    bin_dir = ensure_data(args.data)
    quick = args.quick
    results = {"machine": machine(args.threads), "quick": quick, "rounds": args.rounds}
    results["command"] = "python bench/run.py " + " ".join(
        shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])
    )
    results["max_tokens"] = args.max_tokens
    results["started"] = time.strftime("%Y-%m-%d %H:%M")
    results["commit"] = measure.commit(REPO, ["luong_plugin", "bench"])

    log("GEMM peak")
    n = 256 if quick else 2048
    gemm_rounds = max(3, 2 * args.rounds)
    results["gemm"] = {"n": n, "flops": measure.gemm_peak(n, gemm_rounds)}

    names = QUICK_SYSTEMS if quick else [s.name for s in SYSTEMS]
    per_round = batches_per_round(args)
    log(f"training, dropout 0: {len(names)} systems x {args.rounds} rounds x {per_round} batches")
    train, batches, dims, built = training(
        args, bin_dir, names, 0.0, "label_smoothed_cross_entropy", per_round
    )
    results["train"] = train
    results["dims"] = {k: v for k, v in dims.items() if k != "pad"}
    results["batches"] = [
        list(b["net_input"]["src_tokens"].shape) + [list(b["target"].shape)[1]] for b in batches
    ]
    results["flops"] = {}
    for name in names:
        spec = system(name)
        if name == "base":
            continue
        lstm = spec.args == FAIRSEQ_LSTM  # global general attention with input feeding
        window = "global" if lstm or "global" in spec.args else "local"
        feed = lstm or "--input-feeding" in spec.args
        flops = measure.training_flops(batches, dims, window, feed)
        results["flops"][name] = {
            "per_token": flops / measure.target_tokens(batches),
            "flop_s": flops / train[name]["seconds"],
        }

    if "global-general" in built:
        log("decoder path: fused vs per-step; output layer + loss alone")
        results["decoder_path"] = decoder_path(args, built, batches)

    log("profile of one update")
    pair = [REFERENCE, "global-general feed", "global-general feed" + FUSED]
    results["profile"] = {
        name: measure.profile_table(
            measure.make_update(built[name][2], built[name][3], batches[:1]), 12 if not quick else 3
        )
        for name in pair
    }
    del built

    if not quick:
        log("training, dropout 0.2")
        train_drop, _, _, _ = training(
            args, bin_dir, pair, 0.2, "label_smoothed_cross_entropy", per_round
        )
        results["train_dropout"] = train_drop

        log("training, paper shape (4 x 1000)")
        paper_args = argparse.Namespace(**vars(args))
        paper_args.max_tokens = 1500
        paper_args.rounds = max(2, args.rounds // 2)
        train_paper, paper_batches, paper_dims, paper_built = training(
            paper_args, bin_dir, pair, 0.0, "label_smoothed_cross_entropy", 1, PAPER_SIZES
        )
        del paper_built
        results["train_paper"] = train_paper
        results["paper_dims"] = {k: v for k, v in paper_dims.items() if k != "pad"}
        results["paper_max_tokens"] = paper_args.max_tokens
        paper_flops = measure.training_flops(paper_batches, paper_dims, "global", True)
        results["flops_paper"] = {
            name: {
                "per_token": paper_flops / measure.target_tokens(paper_batches),
                "flop_s": paper_flops / train_paper[name]["seconds"],
            }
            for name in pair
        }

    log("beam-5 generation")
    gen_names = GENERATION_SYSTEMS[:2] if quick else GENERATION_SYSTEMS
    results["generate"] = generation(
        args, bin_dir, gen_names, sentences=8 if quick else 200, batch_size=8 if quick else 50
    )

    log("peak memory (one process per system)")
    child_argv = [
        "--data",
        args.data,
        "--threads",
        str(args.threads),
        "--max-tokens",
        str(args.max_tokens),
    ]
    mem_names = MEMORY_SYSTEMS[:1] if quick else MEMORY_SYSTEMS
    results["memory"] = {
        name: measure.memory_in_child(os.path.abspath(__file__), name, child_argv)
        for name in mem_names
    }

    log("training with glibc's allocator (a child process started without tcmalloc)")
    malloc_argv = child_argv + ["--rounds", str(args.rounds)] + (["--quick"] if quick else [])
    results["malloc"] = measure.json_from_child(
        os.path.abspath(__file__),
        malloc_argv + ["--malloc-child"],
        env=measure.without_tcmalloc(os.environ),
    )
    results["malloc"]["parent"] = measure.allocator(os.environ)

    log("bf16 mixed precision against fp32")

    def memory(name, max_tokens):
        argv = child_argv[: child_argv.index("--max-tokens")] + ["--max-tokens", str(max_tokens)]
        return measure.memory_in_child(os.path.abspath(__file__), name, argv)

    results["bf16"] = bf16.run_section(args, bin_dir, training, generation, memory, log)

    log("attention step time against the source length")
    lengths = [25, 100] if quick else micro_attention.LENGTHS
    results["attention"] = micro_attention.decoding_cost(args, lengths, batch=64, hidden=dims["H"])
    log("attention training step (forward + backward) against the source length")
    train_lengths = [25, 100] if quick else micro_attention.TRAIN_LENGTHS
    results["attention_train"] = micro_attention.training_cost(args, train_lengths, batch=48,
                                                     hidden=dims["H"])  # fmt: skip

    log("GEMM peak again (the best of both measurements is the peak)")
    results["gemm"]["flops"] = max(results["gemm"]["flops"], measure.gemm_peak(n, gemm_rounds))
    # utilisation uses the final peak
    for key in ("flops", "flops_paper"):
        for name, entry in results.get(key, {}).items():
            entry["utilisation"] = entry["flop_s"] / results["gemm"]["flops"]
    results["load_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results["minutes"] = (time.time() - started) / 60
    if args.json:  # first, so that the page never names a results file a failure left unwritten
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    write_page(results, args.out)
    log(f"wrote {args.out} in {results['minutes']:.1f} min")
    print(report.summary(results))


if __name__ == "__main__":
    main()
