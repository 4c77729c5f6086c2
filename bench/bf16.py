"""bf16 mixed precision (``--precision bf16``) against fp32: a section of run.py.

Every system below is one of systems.py's, built as fairseq-train builds it, with
``--precision bf16`` added when its name ends in ``BF16``. The bf16 and fp32 runs
of a model are interleaved round by round with fairseq's ``lstm`` (fp32, as
fairseq runs it on a CPU: its ``--bf16`` needs an XLA device and its ``--amp``
autocasts CUDA only), at the demo's size and batches (1 x 256, 8K vocabulary,
``--max-tokens 2000``) and at the paper's shape. Utilisation of a bf16 run is
against the bf16 GEMM peak measured in the same run, of an fp32 run against the
fp32 peak.
"""

import argparse
from typing import Callable

import measure
from systems import BF16, FUSED, PAPER_SIZES, REFERENCE, split

OURS = "global-general feed"  # fairseq lstm's model
DEMO = "local-p general feed"  # the demo's model, at D = 10 (systems.py)
DEMO_MAX_TOKENS = 2000

TRAIN = [REFERENCE, OURS, OURS + BF16, OURS + FUSED, OURS + FUSED + BF16, DEMO, DEMO + BF16]
QUICK_TRAIN = [REFERENCE, OURS, OURS + BF16, OURS + FUSED + BF16]
PAPER = [OURS, OURS + BF16, OURS + FUSED, OURS + FUSED + BF16]
GENERATE = [OURS, OURS + BF16, DEMO, DEMO + BF16]
MEMORY = [OURS, OURS + BF16, OURS + FUSED, OURS + FUSED + BF16]
PROFILE = [OURS + BF16, OURS + FUSED + BF16]
# the fp32 and bf16 runs profiled by kind of operator, where both were built
KIND_PAIRS = [(OURS, OURS + BF16), (OURS + FUSED, OURS + FUSED + BF16), (DEMO, DEMO + BF16)]
KIND_ROUNDS = 5


def run_section(args, bin_dir: str, training: Callable, generation: Callable,
                memory: Callable, log: Callable) -> dict:  # fmt: skip
    """The section's results; ``training`` and ``generation`` are throughput.py's and
    ``memory`` run.py's, which build systems by these names."""
    from luong_plugin.modules.precision import cpu_has_native_bf16

    if not cpu_has_native_bf16():
        return {"skipped": "this CPU has no native bf16 instructions (AVX512-BF16 or AMX)"}
    quick = args.quick
    n, rounds = (256 if quick else 2048), max(3, 2 * args.rounds)
    out = {"gemm": {"n": n, "fp32": measure.gemm_peak(n, rounds),
                    "bf16": measure.gemm_peak(n, rounds, dtype="bfloat16")}}  # fmt: skip

    demo = argparse.Namespace(**vars(args))
    demo.max_tokens = args.max_tokens if quick else DEMO_MAX_TOKENS
    names = QUICK_TRAIN if quick else TRAIN
    log(f"bf16: training, {len(names)} systems, --max-tokens {demo.max_tokens}")
    train, batches, dims, built = training(demo, bin_dir, names, 0.0, "label_smoothed_cross_entropy",
                                           1 if quick else 3)  # fmt: skip
    out.update(
        train=train, max_tokens=demo.max_tokens, dims={k: v for k, v in dims.items() if k != "pad"}
    )
    out["flops"] = flops_of(train, batches, dims, out["gemm"])
    log("bf16: profile of one update")
    out["profile"] = {
        name: measure.profile_table(
            measure.make_update(built[name][2], built[name][3], batches[:1]), 3 if quick else 12
        )
        for name in PROFILE
        if name in built
    }
    log("bf16: bf16's gain by kind of operator")
    out["kinds"] = kinds_of(built, batches[0], 1 if quick else KIND_ROUNDS)
    del built

    if not quick:
        log("bf16: training, paper shape (4 x 1000)")
        paper = argparse.Namespace(**vars(args))
        paper.max_tokens, paper.rounds = 1500, max(2, args.rounds // 2)
        train_paper, paper_batches, paper_dims, _ = training(
            paper, bin_dir, PAPER, 0.0, "label_smoothed_cross_entropy", 1, PAPER_SIZES
        )
        out["train_paper"] = train_paper
        out["paper_flops"] = flops_of(train_paper, paper_batches, paper_dims, out["gemm"])

    log("bf16: beam-5 generation")
    gen_names = GENERATE[:2] if quick else GENERATE
    out["generate"] = generation(args, bin_dir, gen_names, sentences=8 if quick else 200,
                                 batch_size=8 if quick else 50)  # fmt: skip
    log("bf16: peak memory (one process per system)")
    out["memory"] = {
        name: memory(name, demo.max_tokens) for name in (MEMORY[:2] if quick else MEMORY)
    }
    return out


def kinds_of(built: dict, batch: dict, rounds: int) -> dict:
    """Each fp32 and bf16 pair of ``KIND_PAIRS`` that was built, profiled by kind of operator
    (``measure.profile_kinds``) on one update of ``batch``, the pairs' systems interleaved
    round by round after a warm-up; each figure is the least of its rounds."""
    rows, steps = batch["target"].shape  # B x T
    names = [n for pair in KIND_PAIRS for n in pair if all(m in built for m in pair)]
    runs = {n: measure.make_update(built[n][2], built[n][3], [batch]) for n in names}
    for run in runs.values():
        run()  # warm-up
    least = {n: {} for n in names}
    for _ in range(rounds):
        for n in names:
            for kind, ms in measure.profile_kinds(runs[n], rows, steps).items():
                least[n][kind] = min(ms, least[n].get(kind, ms))
    return {"batch": [rows, steps], "rounds": rounds, "ms": least}


def flops_of(train: dict, batches, dims: dict, gemm: dict) -> dict:
    """Model FLOP/s of each system and its utilisation of the GEMM peak of its dtype."""
    flops = {}
    for name, v in train.items():
        base, extra = split(name)
        window = "local" if base.startswith("local") else "global"
        total = measure.training_flops(batches, dims, window, feed=True)
        peak = gemm["bf16"] if extra else gemm["fp32"]
        flops[name] = {"flop_s": total / v["seconds"], "utilisation": total / v["seconds"] / peak}
    return flops


def _ratio(results: dict, a: str, b: str, key: str):
    if a in results and b in results:
        return results[a][key] / results[b][key]
    return None


def targets(r: dict, verdict: Callable) -> list:
    """(target, measured, verdict) rows of the bf16 targets and local-p's cost."""
    b = r.get("bf16")
    if not b or "skipped" in b:
        return []
    rows = []
    train = b["train"]
    for model in (OURS, DEMO):
        for loss, how in (("", "fairseq's loss"), (FUSED, "fused loss")):
            ratio = _ratio(train, model + loss + BF16, model + loss, "tok_s")
            if ratio is not None:
                rows.append((f"training at the demo's size and --max-tokens 2000, {model} bf16 vs fp32 >= 1.8x ({how})",
                             f"{ratio:.2f}x", verdict(ratio, 1.8)))  # fmt: skip
    for loss, how in (("", "fairseq's loss"), (FUSED, "fused loss")):
        ratio = _ratio(train, OURS + loss + BF16, REFERENCE, "tok_s")
        if ratio is not None:
            rows.append((f"training, {OURS} bf16 ({how}) vs fairseq lstm fp32 >= 1.5x",
                         f"{ratio:.2f}x", verdict(ratio, 1.5)))  # fmt: skip
    for precision in ("", BF16):  # a local-p update should cost no more than a global one
        ratio = _ratio(train, DEMO + precision, OURS + precision, "tok_s")
        if ratio is not None:
            rows.append((f"training at the demo's size and --max-tokens 2000, {DEMO}{precision} vs {OURS}{precision} >= 1.0x",
                         f"{ratio:.2f}x", verdict(ratio, 1.0)))  # fmt: skip
    for model in (OURS, DEMO):
        ratio = _ratio(b.get("generate", {}), model + BF16, model, "sent_s")
        if ratio is not None:
            rows.append((f"beam-5 generation, {model} bf16 vs fp32 >= 1.5x", f"{ratio:.2f}x",
                         verdict(ratio, 1.5)))  # fmt: skip
    return rows


def markdown(r: dict) -> list:
    """The report's bf16 section, as lines."""
    b = r.get("bf16")
    if not b:
        return []
    out = ["", "## bf16 mixed precision (`--precision bf16`)", ""]
    if "skipped" in b:
        return out + [f"Not measured: {b['skipped']}."]
    g = b["gemm"]
    out += [
        "fp32 master weights and Adam state; products in bf16, softmax, log-softmax, the recurrent",
        "states and p_t in fp32 (`luong_plugin/modules/precision.py`). Same data and batches",
        f"as above but `--max-tokens {b['max_tokens']}` (the demo's: {DEMO_MAX_TOKENS}); rows \"...{BF16}\" add",
        "`--precision bf16`, interleaved with their fp32 runs and fairseq's lstm (fp32: fairseq",
        "has no bf16 on a CPU). GEMM peaks of this run, "
        f"{g['n']} x {g['n']} `torch.matmul`, best round: fp32 **{g['fp32'] / 1e9:.1f}**, "
        f"bf16 **{g['bf16'] / 1e9:.1f} GFLOP/s** ({g['bf16'] / g['fp32']:.2f}x). Utilisation is",
        "against the peak of the row's dtype.",
        "",
        "| system | target tok/s | vs its fp32 run | vs fairseq lstm | utilisation |",
        "|---|---:|---:|---:|---:|",
    ]
    out += _rows(b["train"], b["flops"])
    if "train_paper" in b:
        out += ["", "Paper shape (4 x 1000, `--max-tokens 1500`):", "",
                "| system | target tok/s | vs its fp32 run | vs fairseq lstm | utilisation |",
                "|---|---:|---:|---:|---:|"]  # fmt: skip
        out += _rows(b["train_paper"], b["paper_flops"])
    gen = b.get("generate", {})
    if gen:
        out += [
            "",
            'Beam-5 generation (as in the section "Beam-5 generation" below):',
            "",
            "| system | sentences/s | vs its fp32 run | tokens generated |",
            "|---|---:|---:|---:|",
        ]
        for name, v in gen.items():
            ratio = _ratio(gen, name, split(name)[0], "sent_s")
            out.append(
                f"| {name} | {v['sent_s']:.1f} | {f'{ratio:.2f}x' if ratio else ''} | {v['tokens']} |"
            )
    mem = b.get("memory", {})
    if mem:
        out += [
            "",
            f"Peak memory (a fresh process each, `--max-tokens {b['max_tokens']}`):",
            "",
            "| system | peak RSS MiB | growth during training MiB | vs its fp32 run |",
            "|---|---:|---:|---:|",
        ]
        for name, v in mem.items():
            ratio = _ratio(mem, name, split(name)[0], "peak")
            out.append(
                f"| {name} | {v['peak'] / 2**20:.0f} | {(v['peak'] - v['rss_before']) / 2**20:.0f} | "
                f"{f'{ratio:.2f}x' if ratio else ''} |"
            )
    out += kinds_markdown(b.get("kinds"))
    for name, rows in b.get("profile", {}).items():
        out += [
            "",
            f"Where the time goes, **{name}** (one update, `torch.profiler`, self CPU time):",
            "",
            *profile_markdown(rows),
        ]
    return out


def kinds_markdown(kinds) -> list:
    """The table of bf16's gain by kind of operator, or nothing (a JSON written before it)."""
    if not kinds or not kinds["ms"]:
        return []
    B, T = kinds["batch"]
    out = [
        "",
        f"Where bf16 gains, by kind of operator: one update of the first batch ({B} sentences x "
        f"{T} target steps), `torch.profiler` self CPU time in ms, each kind's least of "
        f"{kinds['rounds']} profiles of each run, the runs interleaved, the totals their sums "
        "(`bench/measure.py:operator_kind`): a step's products are those of the input-feeding "
        "loop, forward and backward, with the batch's rows (B x 512 by 512 x 4H and the like); "
        "a step's attention products are its B x 1 x K batched products, fp32 by design; the "
        "products over the whole batch are the encoder's LSTM, the output layer, the loss and "
        "the weights' gradients (one GEMM over all steps); the rest is every other operator "
        "(elementwise work, casts, softmax, autograd's nodes, Adam).",
        "",
        "| system | kind | fp32 ms | bf16 ms | bf16 vs fp32 | share of the bf16 update |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for fp32, bf16 in KIND_PAIRS:
        if fp32 not in kinds["ms"] or bf16 not in kinds["ms"]:
            continue
        a, b = kinds["ms"][fp32], kinds["ms"][bf16]
        total_b = sum(b.values())
        for kind in measure.KINDS + ("all",):
            x, y = (sum(a.values()), total_b) if kind == "all" else (a[kind], b[kind])
            out.append(f"| {fp32} | {kind} | {x:.1f} | {y:.1f} | "
                       f"{f'{x / y:.2f}x' if y else ''} | {y / total_b:.0%} |")  # fmt: skip
    return out


def profile_markdown(rows) -> list:
    """A markdown table of profiled operators (``measure``'s profile rows)."""
    return [
        "| operator | calls | self ms | share |",
        "|---|---:|---:|---:|",
        *(f"| `{row['op']}` | {row['calls']} | {row['self_ms']:.1f} | {row['share']:.0%} |"
          for row in rows),
    ]  # fmt: skip


def _rows(train: dict, flops: dict) -> list:
    lines = []
    for name, v in train.items():
        own = _ratio(train, name, split(name)[0], "tok_s") if name.endswith(BF16) else None
        ref = _ratio(train, name, REFERENCE, "tok_s")
        util = flops.get(name, {}).get("utilisation")
        lines.append(f"| {name} | {v['tok_s']:,.0f} | {f'{own:.2f}x' if own else ''} | "
                     f"{f'{ref:.2f}x' if ref else ''} | {f'{util:.0%}' if util else ''} |")  # fmt: skip
    return lines
