"""bench/gpu.py's report: summary.md's tables (training target tokens/s with peak GPU
memory, beam-10 sentences/s, or each failure) and the project's targets for a GPU, met or
missed, from one run's numbers (``results.json``'s ``train`` and ``decode``)."""


def best(table: dict, key: str):
    """(precision, value) of the fastest working setting of one model."""
    found = [(p, r[key]) for p, r in table.items() if r.get(key)]
    return max(found, key=lambda pair: pair[1]) if found else (None, None)


GRAPHS = "+graphs"  # bench/gpu.py's (and gpu_probe.py's) name for ours with --cuda-graphs


def best_of_ours(train: dict, model: str):
    """(setting, value) of ``model``'s fastest working setting, with --cuda-graphs or
    without (its ``+graphs`` rows), e.g. ("bf16+graphs", 90000.0)."""
    settings = {p + suffix: r for suffix in ("", GRAPHS)
                for p, r in train.get(model + suffix, {}).items()}  # fmt: skip
    return best(settings, "tokens_per_s")


def targets(train: dict, decode: dict) -> list:
    """(target, measured, met) rows: the project's targets for a GPU (ours in a half
    precision >= 1.5x our fp32, with and without --cuda-graphs; global >= 3x fairseq's
    lstm in its fastest working setting; local-p >= 0.9x global, each in its fastest;
    beam 10 >= 2x lstm), from this run's numbers."""
    rows = []
    lstm_best = best(train.get("lstm", {}), "tokens_per_s")
    ours = ("global", "local-p", "rnnsearch", "global" + GRAPHS, "local-p" + GRAPHS)
    for model in ours:
        table = train.get(model, {})
        fp32 = table.get("fp32", {}).get("tokens_per_s")
        for p in ("bf16", "amp", "fp16"):
            value = table.get(p, {}).get("tokens_per_s")
            if fp32 and value:
                rows.append((f"{model} {p} >= 1.5x {model} fp32", f"{value / fp32:.2f}x",
                             value / fp32 >= 1.5))  # fmt: skip
    glob = best_of_ours(train, "global")
    if glob[1] and lstm_best[1]:
        ratio = glob[1] / lstm_best[1]
        rows.append(
            (f"global ({glob[0]}) >= 3x lstm ({lstm_best[0]})", f"{ratio:.2f}x", ratio >= 3)
        )
    local = best_of_ours(train, "local-p")
    if local[1] and glob[1]:
        ratio = local[1] / glob[1]
        rows.append((f"local-p ({local[0]}) >= 0.9x global ({glob[0]})", f"{ratio:.2f}x",
                     ratio >= 0.9))  # fmt: skip
    lstm_dec = best(decode.get("lstm", {}), "sentences_per_s")
    for model in ("global", "local-p", "rnnsearch"):
        ours = best(decode.get(model, {}), "sentences_per_s")
        if ours[1] and lstm_dec[1]:
            ratio = ours[1] / lstm_dec[1]
            rows.append((f"beam 10: {model} ({ours[0]}) >= 2x lstm ({lstm_dec[0]})",
                         f"{ratio:.2f}x", ratio >= 2))  # fmt: skip
    return rows


def train_cell(r: dict) -> str:
    mem = f" ({r['peak_gib']:.1f} GiB)" if r.get("peak_gib") else ""
    return f"{r['tokens_per_s']:,.0f}{mem}"


def decode_cell(r: dict) -> str:
    return f"{r['sentences_per_s']:.1f}" + ("" if r["equal_lengths"] else " (lengths differ!)")


def table_rows(results: dict, precisions, cell) -> list:
    """One markdown row a model: ``cell`` of each precision's result, or its failure."""
    rows = []
    for model, table in results.items():
        cells = []
        for p in precisions:
            r = table.get(p)
            if r is None:
                cells.append("")
            elif r.get("error", "").startswith("skipped: "):
                cells.append(f"not run ({r['error'][len('skipped: '):]})")
            elif r.get("error"):
                cells.append(f"fails: {r['error'][:80]}")
            else:
                cells.append(cell(r))
        rows.append(f"| {model} | " + " | ".join(cells) + " |")
    return rows


def summary(env, args, train, decode, minutes) -> str:
    lines = [
        "# GPU benchmark", "",
        f"- device: {env['device']}; driver {env.get('driver', '?')}; torch {env['torch']}, "
        f"CUDA {env['cuda']}, cuDNN {env['cudnn']}; Python {env['python']}",
        f"- `python bench/gpu.py{' --dry-run' if args.dry_run else ''}`: {args.updates} updates "
        f"of {args.batch} sentences, timed after update {args.warmup}; {args.rounds} round(s), "
        f"median; beam 10, {args.decode_sentences} sentences forced to {args.decode_len} tokens;"
        f" {minutes:.1f} min in all",
        "", "## Training: target tokens/s (peak GPU memory)", "",
        "| model | " + " | ".join(args.precisions) + " |",
        "|---|" + "---|" * len(args.precisions),
    ]  # fmt: skip
    lines += table_rows(train, args.precisions, train_cell)
    lines += ["", "## Beam-10 decoding: sentences/s", "",
              "| model | " + " | ".join(args.precisions) + " |",
              "|---|" + "---|" * len(args.precisions)]  # fmt: skip
    lines += table_rows(decode, args.precisions, decode_cell)
    lines += ["", "## Targets", ""]
    lines += [f"- {t}: {m} ({'met' if ok else 'missed'})" for t, m, ok in targets(train, decode)]
    return "\n".join(lines) + "\n"
