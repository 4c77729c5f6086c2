"""How local-p's predicted position p_t (Luong et al. 2015, eq. 9) behaves in a
checkpoint, or over the checkpoints of one training run.

    luong-position-trace --data DIR --gen-subset valid --path A.pt [B.pt ...]
        [--json out.json] [--png trace.png] [--grad-batches 8]
    luong-position-trace --from-json out.json --png trace.png

For each checkpoint, teacher-forced on the split's references (forced.py):
- ``corr``: Pearson correlation of p_t / n with t / m over every target word
  (n source words, m target words; the rows of the final ``</s>`` are left
  out): 1 when p_t runs along the diagonal;
- ``p0``: the mean of p_0 / n, where the first target word looks;
- ``mass`` and ``mass0``: the attention weight a row carries in all, over all
  rows and at t = 0 (eq. 10 multiplies the softmax by a Gaussian and does not
  renormalise, so a row whose window sits off its attention keeps little);
- ``at_edge``: the share of rows whose p_t lies before 0.5 or after n - 0.5,
  i.e. at or beyond the first or last source word (a saturated sigmoid sits
  there);
- ``grad_share``: on ``--grad-batches`` batches of the split, the norm of the
  loss gradient of W_p and v_p over the norm of the whole gradient, and
  ``grad_norm`` that whole norm (training clips it to ``--clip-norm``).

Shape legend: B batch, T target len + EOS (padded), S source len + EOS (padded).
"""

import argparse
import json
import math
import sys
from typing import Dict, List

import numpy as np
import torch

from .forced import collate, force_decode, load_ensemble, read_pairs


def checkpoint_updates(path: str) -> int:
    state = torch.load(path, map_location="cpu", weights_only=False)
    history = state.get("optimizer_history") or [{}]
    return int(history[-1].get("num_updates", 0))


def position_stats(forced) -> Dict[str, float]:
    """corr, p0, mass, mass0 and at_edge over the forced-decoded pairs."""
    rel_p, rel_t, p0, mass, mass0, edge = [], [], [], [], [], []
    for f in forced:
        if f.centers is None:
            raise ValueError("--path: the model has no p_t (local-p or local-m attention)")
        n, m = len(f.pair.source), len(f.pair.target)
        if n == 0 or m == 0:
            continue
        rows = f.attention[:m].sum(axis=1)  # m: each word's attention mass
        p_t = f.centers[:m]  # m
        rel_p.extend((p_t / n).tolist())
        rel_t.extend((np.arange(m) / m).tolist())
        p0.append(float(p_t[0]) / n)
        mass.extend(rows.tolist())
        mass0.append(float(rows[0]))
        edge.extend(((p_t < 0.5) | (p_t > n - 0.5)).tolist())
    rel_p, rel_t = np.asarray(rel_p), np.asarray(rel_t)
    corr = float(np.corrcoef(rel_p, rel_t)[0, 1]) if rel_p.std() > 0 else float("nan")
    return {
        "corr": corr,
        "p0": float(np.mean(p0)),
        "mass": float(np.mean(mass)),
        "mass0": float(np.mean(mass0)),
        "at_edge": float(np.mean(edge)),
    }


def gradient_share(model, task, pairs, batches: int, batch_size: int) -> Dict[str, float]:
    """||grad of W_p, v_p|| / ||grad of everything|| on the first batches (no dropout)."""
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    pad = task.source_dictionary.pad()
    model.eval()
    model.zero_grad()
    for start in range(0, min(len(pairs), batches * batch_size), batch_size):
        src, lengths, prev, target = collate(task, pairs[start : start + batch_size])
        logits, _ = model(src, lengths, prev)  # B x T x V
        lprobs = torch.log_softmax(logits.float(), dim=-1)
        loss, _ = label_smoothed_nll_loss(
            lprobs.view(-1, lprobs.size(-1)), target.view(-1), 0.1, ignore_index=pad
        )
        loss.backward()
    position, total = 0.0, 0.0
    for name, param in model.named_parameters():
        if param.grad is None:
            continue
        squared = float(param.grad.float().pow(2).sum())
        total += squared
        if ".window.W_p." in name or ".window.v_p." in name:
            position += squared
    model.zero_grad()
    return {"grad_share": math.sqrt(position / total), "grad_norm": math.sqrt(total)}


def trace(paths: List[str], data: str, subset: str, grad_batches: int, batch_size: int = 32):
    rows = []
    for path in paths:
        models, task = load_ensemble(path, data)
        args = argparse.Namespace(source=None, spm_model=None, gen_subset=subset)
        pairs = read_pairs(args, task)
        row = {"path": path, "updates": checkpoint_updates(path)}
        row.update(position_stats(force_decode(models, task, pairs, batch_size, cpu=True)))
        if grad_batches > 0:
            row.update(gradient_share(models[0], task, pairs, grad_batches, batch_size))
        rows.append(row)
        print(json.dumps(row), flush=True)
    return sorted(rows, key=lambda r: r["updates"])


def plot(rows, png: str, title: str = "") -> None:
    from .plotting import pyplot

    plt = pyplot()
    updates = [r["updates"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, label in [
        ("corr", "corr(p_t / n, t / m)"),
        ("p0", "p_0 / n"),
        ("mass", "attention mass per row"),
        ("at_edge", "share of p_t at an edge"),
    ]:
        ax.plot(updates, [r[key] for r in rows], marker="o", label=label)
    ax.set_xlabel("updates")
    ax.set_ylim(-1.05, 1.05)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--path", nargs="+", help="checkpoints of one run")
    parser.add_argument("--data", help="fairseq data directory")
    parser.add_argument("--from-json", help="plot the rows of an earlier --json instead")
    parser.add_argument("--gen-subset", default="valid", help="binarized split to read")
    parser.add_argument(
        "--grad-batches", type=int, default=8, help="batches for the gradient share (0: skip it)"
    )
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--png", help="plot the rows over updates here")
    parser.add_argument("--title", default="")
    args = parser.parse_args(argv)
    if args.grad_batches < 0 or args.batch_size < 1:
        parser.error("--grad-batches must be >= 0 and --batch-size >= 1")
    if args.from_json:
        if args.path:
            parser.error("give --path (checkpoints to trace) or --from-json (rows to plot)")
        with open(args.from_json) as f:
            rows = json.load(f)
    elif not (args.path and args.data):
        parser.error("--path and --data are required (or --from-json)")
    else:
        try:
            rows = trace(args.path, args.data, args.gen_subset, args.grad_batches, args.batch_size)
        except (ValueError, FileNotFoundError) as e:
            sys.exit(f"luong-position-trace: {e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.png:
        plot(rows, args.png, args.title)


if __name__ == "__main__":
    main()
