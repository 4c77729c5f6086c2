"""Learning curves from fairseq-train logs (Luong Fig. 5).

    luong-curves local-p=runs/demo/train.log global=runs/global/train.log \\
        --metric ppl --png curves.png

Reads what fairseq-train prints with ``--log-format simple`` (the demo's) or
``--log-format json``, and ``--no-progress-bar``: the ``train_inner`` records
(every ``--log-interval`` updates; a run without any falls back to the
per-epoch ``train`` records) and the ``valid`` records. Plots, against the
number of updates, training (dashed) and validation (solid) ``--metric`` of
every run on one PNG, and prints per run the last training value and the best
validation value. Loss and nll_loss are fairseq's, in bits per target token;
ppl = 2^nll_loss. ``nll_loss`` falls back to ``loss`` in logs of
``--criterion cross_entropy``, which logs only the loss (the two are equal there).
"""

import json
import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from .inputs import named, tool_parser
from .plotting import pyplot, save

METRICS = ("ppl", "loss", "nll_loss")
SPLITS = ("both", "train", "valid")
RECORD = re.compile(r"\| (train_inner|train|valid) \| (.*)$")


@dataclass
class Run:
    train_inner: List[Dict[str, float]] = field(default_factory=list)
    train: List[Dict[str, float]] = field(default_factory=list)
    valid: List[Dict[str, float]] = field(default_factory=list)


def _numbers(pairs) -> Dict[str, float]:
    out = {}
    for key, value in pairs:
        try:
            out[key] = float(value)
        except (TypeError, ValueError):
            pass
    return out


def parse_record(kind: str, text: str) -> Dict[str, float]:
    """The numeric fields of one record, keys without the split prefix."""
    text = text.strip()
    if text.startswith("{"):  # json
        prefix = "" if kind == "train_inner" else kind + "_"
        return _numbers(
            (k[len(prefix) :] if k.startswith(prefix) else k, v)
            for k, v in json.loads(text).items()
        )
    if kind == "train_inner":  # epoch 001:     10 / 69 loss=9.39, ppl=670.9, ...
        return _numbers(re.findall(r"([A-Za-z_]+)=([^,\s]+)", text))
    # epoch 001 | valid on 'valid' subset | loss 7.815 | ppl 225.26 | num_updates 40
    return _numbers(
        field_.split(None, 1) for field_ in text.split(" | ") if len(field_.split()) == 2
    )


def read_log(path: str) -> Run:
    run = Run()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            match = RECORD.search(line.rstrip("\n"))
            if match:
                getattr(run, match.group(1)).append(parse_record(*match.groups()))
    if not (run.train_inner or run.train or run.valid):
        raise ValueError(
            f"{path}: no train_inner/train/valid records; expected a fairseq-train log "
            "written with --log-format simple or json and --no-progress-bar"
        )
    return run


def series(records: List[Dict[str, float]], metric: str) -> Tuple[List[float], List[float]]:
    """(updates, values) of the records that have both."""
    if metric not in METRICS:
        raise ValueError(f"--metric {metric!r}: expected one of {', '.join(METRICS)}")
    xs, ys = [], []
    for record in records:
        value = record.get(metric)
        if value is None and metric == "nll_loss":
            value = record.get("loss")
        if value is not None and "num_updates" in record:
            xs.append(record["num_updates"])
            ys.append(value)
    return xs, ys


def training_records(run: Run) -> List[Dict[str, float]]:
    return run.train_inner or run.train


def plot(runs: Dict[str, Run], metric: str, path: str, split="both", title="") -> str:
    if split not in SPLITS:
        raise ValueError(f"--split {split!r}: expected one of {', '.join(SPLITS)}")
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=100)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for k, (name, run) in enumerate(runs.items()):
        color = colors[k % len(colors)]
        if split in ("both", "train"):
            xs, ys = series(training_records(run), metric)
            ax.plot(xs, ys, "--", color=color, alpha=0.8, label=f"{name} train")
        if split in ("both", "valid"):
            xs, ys = series(run.valid, metric)
            ax.plot(xs, ys, "-o", color=color, markersize=4, label=f"{name} valid")
    ax.set_xlabel("updates")
    ax.set_ylabel({"ppl": "perplexity", "loss": "loss (bits/token)"}.get(metric, metric))
    if metric == "ppl":
        from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    return save(fig, path)


def summary(runs: Dict[str, Run], metric: str) -> str:
    lines = [
        f"| run | updates | last train {metric} | best valid {metric} (at update) |",
        "|---|---|---|---|",
    ]
    for name, run in runs.items():
        tx, ty = series(training_records(run), metric)
        vx, vy = series(run.valid, metric)
        updates = int(max(tx + vx)) if tx or vx else 0
        last = f"{ty[-1]:.3f}" if ty else "-"
        best = "-"
        if vy:
            k = min(range(len(vy)), key=vy.__getitem__)
            best = f"{vy[k]:.3f} ({int(vx[k])})"
        lines.append(f"| {name} | {updates} | {last} | {best} |")
    return "\n".join(lines)


def run_name(path: str) -> str:
    """runs/demo/train.log -> demo"""
    return os.path.basename(os.path.dirname(os.path.abspath(path)))


def main(argv=None):
    parser = tool_parser(__doc__)
    parser.add_argument("logs", nargs="+", metavar="[NAME=]LOG", help="fairseq-train logs")
    parser.add_argument("--metric", default="ppl", choices=METRICS)
    parser.add_argument("--split", default="both", choices=SPLITS)
    parser.add_argument("--png", required=True, help="PNG to write")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    runs = {}
    try:
        for spec in args.logs:
            name, path = named(spec, run_name)
            runs[path if name in runs else name] = read_log(path)
    except (OSError, ValueError) as e:
        parser.error(str(e))
    print(summary(runs, args.metric))
    print(plot(runs, args.metric, args.png, args.split, args.title))


if __name__ == "__main__":
    main()
