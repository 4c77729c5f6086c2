"""Do the fast paths change what a model learns? The same seed, trained fast and plain.

    python -m experiments.trajectory [--updates 300] [--models global local-p]

Trains the demo's model (compare_runs.py's ``global-forward-luong`` and
``local-p-forward-renorm``, in fp32) for ``--updates`` updates from one seed in
four ways, each in a fresh process on one thread, and compares their training
loss, logged every ``--log-every`` updates, with the ``fast`` run's:

- ``fast``: as ``fairseq-train`` trains it (luong_loop.py: gates precomputed,
  weights concatenated once per update, ``LoopWeight``, eq. (9) as one node);
- ``plain``: ``LuongDecoder.paper_loop`` instead, the loop as the paper reads it,
  with autograd's own backward;
- ``fused``: ``fast`` with ``--criterion fused_label_smoothed_cross_entropy``;
- ``ulp1``, ``ulp2``, ``ulp3``: ``fast`` from initial parameters moved by one
  rounding step (each times 1 ± 2^-23, three draws of the signs): the control,
  how far rounding alone carries a run.

The two paths compute the same function and draw the dropout masks in the same
order (tests/test_fast_paths.py), so ``plain`` and ``fused`` differ from ``fast``
by rounding only, and rounding differences grow as training goes on. They
change the trajectory beyond rounding only if they part from ``fast`` by more
than the ``ulp`` runs do. Writes ``docs/experiments/trajectory/fast_and_plain.json``; compare_page.py
renders it into docs/COMPARE.md. Each model's runs are written as they finish; a
second call with the same settings and commit trains only the models still missing.
"""

import argparse
import json
import os
import re
import sys

from experiments import compare, harness
from experiments.compare_runs import RUNS

ULPS = ("ulp1", "ulp2", "ulp3")
VARIANTS = ("fast", "plain", "fused", *ULPS)
MODELS = {"global": "global-forward-luong", "local-p": "local-p-forward-renorm"}
OUT = os.path.join(harness.REPO, "docs", "experiments", "trajectory", "fast_and_plain.json")
MARK = {"plain": "[trajectory] the paper's loop", **{u: f"[trajectory] {u}: moved" for u in ULPS}}
TRAIN_LOSS = re.compile(r"train_inner.*? loss=([\d.]+),.*? num_updates=(\d+)")


def worker(variant: str, argv) -> None:
    """Runs fairseq-train in this process, patched for ``variant``."""
    import torch
    from fairseq_cli.train import cli_main  # first: it sets up the log's format

    torch.set_num_threads(1)
    if variant == "plain":
        from luong_plugin.modules import luong_loop

        def plain(decoder, x, state, encoder_out, steps, incremental_state=None, feed=None):
            assert incremental_state is None and feed is None  # training only
            if not plain.told:
                print(MARK["plain"], file=sys.stderr, flush=True)
                plain.told = True
            return decoder.paper_loop(x, state, encoder_out, steps)

        plain.told = False
        luong_loop.run = plain  # luong_decoder.py calls luong_loop.run
    if variant in ULPS:
        from luong_plugin.models import luong

        init = luong.init_uniform_

        def moved(model, init_range):
            init(model, init_range)
            generator = torch.Generator().manual_seed(12345 + ULPS.index(variant))
            with torch.no_grad():
                for param in model.parameters():
                    sign = torch.randint(0, 2, param.shape, generator=generator) * 2 - 1
                    param.mul_(1 + sign.to(param.dtype) * 2.0**-23)
            print(MARK[variant], file=sys.stderr, flush=True)

        luong.init_uniform_ = moved  # build_model calls luong.init_uniform_

    sys.argv = ["fairseq-train", *argv]
    cli_main()


def train(model: str, variant: str, args) -> dict:
    options = list(RUNS[MODELS[model]][1])
    options[options.index("--precision") + 1] = "fp32"  # the plain loop's dtype
    if variant == "fused":
        options += ["--criterion", "fused_label_smoothed_cross_entropy"]
    try:
        argv = compare.worker_argv(options, args.seed, args, args.log_every)
        log = harness.run_worker("trajectory", variant, argv, args.python)
    except RuntimeError as error:
        raise RuntimeError(f"{model} {error}") from None
    if variant in MARK and MARK[variant] not in log:
        raise RuntimeError(f"{model} {variant}: the patch did not take effect")
    # the later criterion's loss line wins if fairseq logs one twice
    loss = {int(m.group(2)): float(m.group(1)) for m in TRAIN_LOSS.finditer(log)}
    ppl, wall = harness.parse_log(log)
    return {"train_loss": {str(k): v for k, v in sorted(loss.items())},
            "valid_ppl": {str(k): v for k, v in ppl.items()}, "wall_s": wall}  # fmt: skip


def parting(run: dict, fast: dict) -> dict:
    """How far ``run``'s training loss is from ``fast``'s: the largest and the
    mean absolute difference over the logged updates, and at the last one."""
    steps = sorted(set(run["train_loss"]) & set(fast["train_loss"]), key=int)
    diffs = [abs(run["train_loss"][s] - fast["train_loss"][s]) for s in steps]
    return {"max": max(diffs), "mean": sum(diffs) / len(diffs), "last": diffs[-1]}


def table_lines() -> list:
    """docs/COMPARE.md's section on the fast paths, from OUT; none before it exists."""
    if not os.path.exists(OUT):
        return []
    with open(OUT) as f:
        result = json.load(f)
    lines = [
        "## Do the fast paths change what the model learns?",
        "",
        f"Rendered from `{os.path.relpath(OUT, harness.REPO)}` (`python -m experiments.trajectory`,"
        f" commit {result['commit']}): the same seed ({result['seed']}) trained {result['updates']}"
        f" updates in fp32, one thread, in {len(VARIANTS)} ways. Training loss logged every"
        f" {result['log_every']} updates; its distance from the `fast` run's, the mean and the",
        "largest over the logged updates and the last one. The `ulp` runs are the control: the"
        " `fast` run from initial parameters moved by one rounding step (three draws), so their"
        " distances are what rounding alone does to a run.",
        "",
    ]
    for model, entry in result["models"].items():
        runs = entry["variants"]
        checks = sorted(runs["fast"]["valid_ppl"], key=int)
        lines += [
            f"`{entry['run']}` ({model}):",
            "",
            "| variant | "
            + " | ".join(f"valid ppl @ {c}" for c in checks)
            + " | mean / max / last distance of the train loss from `fast` |",
            "|---|" + "---|" * (len(checks) + 1),
        ]
        for variant, run in runs.items():
            cells = [f"{run['valid_ppl'].get(c, float('nan')):.2f}" for c in checks]
            far = run.get("from_fast")
            dist = (
                "" if far is None else f"{far['mean']:.4f} / {far['max']:.4f} / {far['last']:.4f}"
            )
            lines.append(f"| `{variant}` | " + " | ".join(cells) + f" | {dist} |")
        lines.append("")
    return lines


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        if len(argv) < 3 or argv[1] not in VARIANTS or argv[2] != "--":
            sys.exit(f"usage: --worker {{{','.join(VARIANTS)}}} -- FAIRSEQ_ARGS")
        return worker(argv[1], argv[3:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--validate-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--data", default=harness.DATA)
    parser.add_argument("--python", default=harness.PYTHON)
    args = parser.parse_args(argv)
    if args.updates < args.log_every or args.log_every < 1:
        parser.error("--log-every must be >= 1 and --updates >= --log-every")
    result = {"updates": args.updates, "log_every": args.log_every, "seed": args.seed,
              "commit": harness.describe_commit(), "models": {}}  # fmt: skip
    if os.path.exists(OUT):  # resume: keep the models a run with these settings finished
        with open(OUT) as f:
            before = json.load(f)
        if all(before[k] == result[k] for k in ("updates", "log_every", "seed", "commit")):
            result["models"] = before["models"]
    for model in args.models:
        if model in result["models"]:
            print(f"{model}: done, in {OUT}", flush=True)
            continue
        runs = {}
        for variant in VARIANTS:
            runs[variant] = train(model, variant, args)
            print(f"{model} {variant}: valid ppl {runs[variant]['valid_ppl']}", flush=True)
        for variant in VARIANTS[1:]:
            runs[variant]["from_fast"] = parting(runs[variant], runs["fast"])
            print(f"{model} {variant} - fast: {runs[variant]['from_fast']}", flush=True)
        result["models"][model] = {"run": MODELS[model], "variants": runs}
        os.makedirs(os.path.dirname(OUT), exist_ok=True)
        with open(OUT + ".tmp", "w") as f:  # each model as it finishes
            json.dump(result, f, indent=1)
        os.replace(OUT + ".tmp", OUT)
        harness.render_compare_page(args.python)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
