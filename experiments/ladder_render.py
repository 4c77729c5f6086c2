"""docs/RESULTS.md and docs/img/ladder.png from the ladder's JSON files alone.

Only results whose options are the ones the ladder trains now (``ladder_train.options``,
precision aside: it follows the machine) are shown; every row x seed without one is
listed as still to run, so a partly finished ladder renders an honest page.
"""

import os
from decimal import Decimal
from typing import Dict, NamedTuple

from experiments.harness import decimal_text, seed_cell
from experiments.ladder_rows import (
    BAHDANAU,
    ENSEMBLE,
    MEMBERS,
    NAMES,
    OURS_BESIDE_PEER,
    PAPER_BAHDANAU,
    PAPER_TABLE1,
    PAPER_TABLE4,
    PEER,
    ROWS,
    TABLE1,
    TABLE4,
    TABLE4_LABELS,
)
from experiments.ladder_text import data_lines, intro_lines, notes_lines, reading_lines, runs_lines
from experiments.ladder_train import ensemble_options, options, read_json, same_but_precision

# ------------------------------------------------------------------ the spread rule


class Step(NamedTuple):
    gain: Decimal  # mean after - mean before, exact
    spread_before: float  # max - min over the seeds of the row before
    spread_after: float
    verdict: str  # one of VERDICTS


VERDICTS = {
    "shown": "yes",
    "within spread": "no: within the seeds' spread",
    "reversed": "no: worse, beyond the spread",
    "needs two seeds": "not judged: needs two seeds",
}


def step(before: Dict[int, float], after: Dict[int, float]) -> Step:
    """A step from ``before`` to ``after`` ({seed: BLEU}, two decimals) counts as shown
    only when the gain of the means exceeds the spread of the seeds of both rows; a tie
    is not shown. Exact: the comparison runs in integer hundredths, multiplied through
    by both seed counts."""
    if not before or not after:
        raise ValueError("a step needs a value before and after")
    nb, na = len(before), len(after)
    b = [round(v * 100) for v in before.values()]
    a = [round(v * 100) for v in after.values()]
    gain = sum(a) * nb - sum(b) * na  # (mean after - mean before) * nb * na
    spread = max(max(b) - min(b), max(a) - min(a)) * nb * na
    if nb < 2 or na < 2:
        verdict = "needs two seeds"
    elif gain > spread:
        verdict = "shown"
    elif -gain > spread:
        verdict = "reversed"
    else:
        verdict = "within spread"
    exact = Decimal(gain) / (100 * nb * na)
    return Step(exact, (max(b) - min(b)) / 100, (max(a) - min(a)) / 100, verdict)


# ---------------------------------------------------------------------- the results


def load(results_dir: str, budget, seeds):
    """-> ({(row, seed): result} at the current options, [(row, seed) still to run],
    [(row, seed) whose result has other options])."""
    found = {}
    if os.path.isdir(results_dir):
        for fname in sorted(os.listdir(results_dir)):
            if fname.endswith(".json") and ".seed" in fname:
                r = read_json(os.path.join(results_dir, fname))
                found[(r["row"], r["seed"])] = r
    seeds = sorted(set(seeds) | {s for _, s in found})
    current, todo, other = {}, [], []
    for name in NAMES:
        for seed in seeds:
            if name == ENSEMBLE:
                wanted = ensemble_options(seed, results_dir, budget)
            else:
                wanted = options(name, budget)
            r = found.get((name, seed))
            if r is None:
                todo.append((name, seed))
            elif wanted is None or not same_but_precision(r["options"], wanted):
                other.append((name, seed))
            else:
                current[(name, seed)] = r
    return current, todo, other


def values(results, name, key="tokenized_bleu", variant="plain"):
    """{seed: value} of one row: a score of one decoding, or a training figure."""
    out = {}
    for (n, seed), r in results.items():
        if n != name:
            continue
        if key in ("best_valid_ppl", "s_per_100_updates", "epochs"):
            out[seed] = r.get(key)
        elif variant in r["scores"]:
            out[seed] = r["scores"][variant][key]
    return {s: v for s, v in sorted(out.items()) if v is not None}


def cell(vals, digits=2):
    """``mean (seed 1 / seed 2)``, one seed's value with its seed, or – (``harness.seed_cell``)."""
    return seed_cell(vals, digits, empty="–")


def step_cells(before, after):
    if not before or not after:
        return ["", ""]
    s = step(before, after)
    gain = ("+" if s.gain >= 0 else "") + decimal_text(s.gain)  # half up, as the cells
    if s.verdict == "needs two seeds":
        return [gain, VERDICTS[s.verdict]]
    spread = f"{s.spread_before:.2f} / {s.spread_after:.2f}"
    return [f"{gain} (spreads {spread})", VERDICTS[s.verdict]]


# ------------------------------------------------------------------------- tables


def table1_rows():
    """(label, (row, decoding), the (row, decoding) its step starts from, paper cells)."""
    last = TABLE1[-1]
    rows = [
        (ROWS[name].label, (name, "plain"), (TABLE1[i - 1], "plain") if i else None,
         PAPER_TABLE1[name])
        for i, name in enumerate(TABLE1)
    ]  # fmt: skip
    ensemble = f"Ensemble {len(MEMBERS)} models"
    return rows + [
        ("+ unk replace (copy the aligned source word)", (last, "unk_copy"), (last, "plain"),
         PAPER_TABLE1["unk"]),
        ("+ unk replace (dictionary from the training data)", (last, "unk_dict"),
         (last, "plain"), ("", "")),
        (f"{ensemble} + unk replace (copy)", (ENSEMBLE, "unk_copy"), (last, "unk_copy"),
         PAPER_TABLE1["ensemble"]),
        (f"{ensemble} + unk replace (dictionary)", (ENSEMBLE, "unk_dict"), (last, "unk_dict"),
         ("", "")),
        (f"{ensemble}, no unk replacement", (ENSEMBLE, "plain"), (last, "plain"), ("", "")),
    ]  # fmt: skip


def table1(r):
    lines = [
        "## Luong et al. Table 1: the ladder",
        "",
        "Each step is compared with the row above it; the `+ unk replace` rows with the",
        "local-p row, the ensembles with the local-p row decoded the same way.",
        "",
        "| System | Ppl | BLEU (tok.) | gain | beyond the spread? | sacreBLEU | paper Ppl | "
        "paper BLEU |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, (name, variant), before, paper in table1_rows():
        bleu = values(r, name, variant=variant)
        gain = step_cells(values(r, before[0], variant=before[1]), bleu) if before else ["", ""]
        ppl = cell(values(r, name, "best_valid_ppl")) if variant == "plain" and name in ROWS else ""
        sacre = cell(values(r, name, "sacrebleu", variant))
        lines.append(f"| {label} | {ppl} | {cell(bleu)} | {' | '.join(gain)} | {sacre} | "
                     f"{' | '.join(paper)} |")  # fmt: skip
    return lines


def table4(r):
    lines = [
        "## Luong et al. Table 4: attentional architectures",
        "",
        "All with reverse, dropout and feed input, as in the paper; tokenised BLEU before and",
        "after unk replacement, by copying the aligned source word and by the dictionary.",
        "",
        "| System | Ppl | BLEU (tok.) before | after unk (copy) | after unk (dictionary) | "
        "sacreBLEU before | paper Ppl | paper before | paper after |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in TABLE4:
        cells = [
            cell(values(r, name, "best_valid_ppl")),
            *(cell(values(r, name, variant=v)) for v in ("plain", "unk_copy", "unk_dict")),
            cell(values(r, name, "sacrebleu")),
            *PAPER_TABLE4[name],
        ]
        lines.append(f"| {TABLE4_LABELS.get(name, ROWS[name].label)} | {' | '.join(cells)} |")
    return lines


def table_bahdanau(r):
    lines = [
        "## Bahdanau et al.: RNNsearch against RNNencdec",
        "",
        "Both without dropout, as in the paper; the paper columns are the -50 models (trained",
        "on sentences of up to 50 words), on all test sentences and on those without unknown",
        "words.",
        "",
        "| Model | Ppl | BLEU (tok.) | sacreBLEU | paper BLEU (All) | paper BLEU (No UNK) |",
        "|---|---|---|---|---|---|",
    ]
    for name in BAHDANAU:
        cells = [cell(values(r, name, "best_valid_ppl")), cell(values(r, name)),
                 cell(values(r, name, "sacrebleu")), *PAPER_BAHDANAU[name]]  # fmt: skip
        lines.append(f"| {ROWS[name].label} | {' | '.join(cells)} |")
    before, after = values(r, BAHDANAU[0]), values(r, BAHDANAU[1])
    if before and after:
        gain, verdict = step_cells(before, after)
        lines += ["", f"RNNsearch − RNNencdec: {gain}; beyond the spread? {verdict} "
                  "(the paper: +8.93 on All)."]  # fmt: skip
    return lines


def table_peer(r):
    lines = [
        "## fairseq's own `lstm` at the same size",
        "",
        "| Model | Ppl | BLEU (tok.) | sacreBLEU | s / 100 updates |",
        "|---|---|---|---|---|",
    ]
    for name in [*PEER, *OURS_BESIDE_PEER]:
        cells = [cell(values(r, name, "best_valid_ppl")), cell(values(r, name)),
                 cell(values(r, name, "sacrebleu")),
                 cell(values(r, name, "s_per_100_updates"), 0)]  # fmt: skip
        lines.append(f"| {ROWS[name].label} | {' | '.join(cells)} |")
    return lines


# ---------------------------------------------------------------------------- plot

PLOTTED = [(n, "plain", ROWS[n].label) for n in ROWS] + [
    (TABLE1[-1], "unk_copy", "local-p (general) + unk (copy)"),
    (TABLE1[-1], "unk_dict", "local-p (general) + unk (dictionary)"),
    (ENSEMBLE, "plain", "ensemble"),
    (ENSEMBLE, "unk_copy", "ensemble + unk (copy)"),
    (ENSEMBLE, "unk_dict", "ensemble + unk (dictionary)"),
]


def plot(r, path):
    """Tokenised BLEU per row: each seed a point, the mean a bar; rows not run are empty."""
    from luong_plugin.analysis.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(10, 4.8))
    per_row = [values(r, name, variant=variant) for name, variant, _ in PLOTTED]
    for x, vals in enumerate(per_row):
        if vals:
            ax.bar(x, sum(vals.values()) / len(vals), width=0.6, color="#c6dbef")
    seeds = sorted({seed for vals in per_row for seed in vals})
    for i, seed in enumerate(seeds):
        xs = [x for x, vals in enumerate(per_row) if seed in vals]
        ax.plot(xs, [per_row[x][seed] for x in xs], "osD^v"[i % 5], color="#08519c",
                linestyle="none", ms=5, label=f"seed {seed}")  # fmt: skip
    labels = [
        label.replace("Base + reverse + dropout + ", "… + ").replace("`", "")
        + ("" if vals else " (to run)")
        for (_, _, label), vals in zip(PLOTTED, per_row)
    ]
    ax.set_xticks(range(len(PLOTTED)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("tokenised BLEU (test)")
    ax.set_title("The ladder: tokenised BLEU per row (bar: mean; points: seeds)")
    if seeds:
        ax.legend(fontsize=8)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save(fig, path)


# ---------------------------------------------------------------------------- page


def render(budget, results_dir: str, out: str, plot_path: str, seeds=(1, 2)):
    r, todo, other = load(results_dir, budget, seeds)
    data = read_json(os.path.join(results_dir, "data.json"))
    lines = intro_lines(budget, r, data)
    lines += data_lines(budget, data)
    for table in (table1, table4, table_bahdanau, table_peer):
        lines += ["", *table(r)]
    lines += reading_lines(results_dir, out)
    lines += runs_lines(r, todo, other, out, plot_path, has_plot=bool(r))
    lines += notes_lines(r)
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    if r:
        plot(r, plot_path)
    return r, todo, other
