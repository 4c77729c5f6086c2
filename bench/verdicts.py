"""The targets of docs/BENCHMARKS.md checked against the numbers of the same run:
(target, measured, verdict) rows, for report.py's table and run.py's summary."""

import bf16
from systems import FUSED, REFERENCE

OURS = "global-general feed"


def verdict(value: float, target: float, more_is_better: bool = True) -> str:
    met = value >= target if more_is_better else value <= target
    if met:
        return "met"
    gap = (target / value - 1) if more_is_better else (value / target - 1)
    return f"missed by {gap:.0%}"


def targets(r: dict) -> list:
    """(target, measured, verdict) rows for the speed targets docs/BENCHMARKS.md states."""
    rows = []
    train = r["train"]
    pairs = [
        (OURS, REFERENCE, "both with fairseq's loss"),
        (OURS + FUSED, REFERENCE, "ours with the fused loss, fairseq lstm with its own"),
        (OURS + FUSED, REFERENCE + FUSED, "both with the fused loss"),
    ]
    for ours, peer, how in pairs:
        if ours in train and peer in train:
            ratio = train[ours]["tok_s"] / train[peer]["tok_s"]
            rows.append(
                (
                    f"training, global-general + feeding vs fairseq lstm >= 1.2x ({how})",
                    f"{ratio:.2f}x",
                    verdict(ratio, 1.2),
                )
            )
    malloc = r.get("malloc")
    if malloc:
        glibc = malloc["train"]
        for ours, peer, how in pairs:
            if ours in glibc and peer in glibc:
                ratio = glibc[ours]["tok_s"] / glibc[peer]["tok_s"]
                rows.append(
                    (
                        f"the same on {malloc['allocator']}'s allocator ({how})",
                        f"{ratio:.2f}x",
                        verdict(ratio, 1.2),
                    )
                )
    for loss in ("", FUSED):
        fused, stepped = "global-general" + loss, "global-general per-step" + loss
        if fused in train and stepped in train:
            ratio = train[fused]["tok_s"] / train[stepped]["tok_s"]
            how = "fused loss" if loss else "fairseq's loss"
            rows.append(
                (
                    f"no feeding: fused path vs per-step path >= 2.5x ({how})",
                    f"{ratio:.2f}x",
                    verdict(ratio, 2.5),
                )
            )
    path = r.get("decoder_path")
    if path:
        ratio = path["per_step"] / path["fused"]
        rows.append(
            (
                "no feeding: fused vs per-step, decoder path alone (LSTM + attention, fwd + bwd)",
                f"{ratio:.2f}x",
                verdict(ratio, 2.5),
            )
        )
    gen = r.get("generate", {})
    if REFERENCE in gen and OURS in gen:
        ratio = gen[OURS]["sent_s"] / gen[REFERENCE]["sent_s"]
        rows.append(
            ("beam-5 generation vs fairseq lstm >= 1.2x", f"{ratio:.2f}x", verdict(ratio, 1.2))
        )
    mem = r.get("memory", {})
    for ours in (OURS, OURS + FUSED):
        if REFERENCE in mem and ours in mem:
            ratio = mem[ours]["peak"] / mem[REFERENCE]["peak"]
            how = " (ours with the fused loss)" if ours.endswith(FUSED) else ""
            rows.append(
                (
                    f"peak memory vs fairseq lstm <= 1.0x{how}",
                    f"{ratio:.2f}x",
                    verdict(ratio, 1.0, False),
                )
            )
    att = r.get("attention", {})
    for window in ("local-m", "local-p"):
        times = att.get(window, {})
        if 25 in times and 400 in times:
            ratio = times[400] / times[25]
            rows.append(
                (
                    f"{window} step time, S=400 vs S=25 <= 1.3x",
                    f"{ratio:.2f}x",
                    verdict(ratio, 1.3, False),
                )
            )
    flops = r.get("flops_paper", r.get("flops", {}))
    for ours in (OURS, OURS + FUSED):
        if ours in flops:
            util = flops[ours]["utilisation"]
            shape = "paper shape 4 x 1000" if "flops_paper" in r else "demo shape 1 x 256"
            how = ", fused loss" if ours.endswith(FUSED) else ""
            rows.append(
                (
                    f"training utilisation ({shape}{how}) >= 35% of GEMM peak",
                    f"{util:.0%}",
                    verdict(util, 0.35),
                )
            )
    return rows + bf16.targets(r, verdict)
