"""The prose of docs/RESULTS.md around the ladder's tables: what was trained and how,
the data, every run and what is still to run; all of it from the JSON files."""

import os
import textwrap

from experiments.ladder_rows import ENSEMBLE, NAMES, ROWS


def _any(results, key):
    return next((r[key] for r in results.values() if key in r), None)


def _signatures(results):
    for r in results.values():
        s = r["scores"]["plain"]
        return s["tokenized_bleu_signature"], s["sacrebleu_signature"]
    return None, None


def wrap(*paragraphs):
    """Markdown paragraphs, each wrapped at 92 columns, a blank line between them."""
    lines = []
    for text in paragraphs:
        lines += [*textwrap.wrap(text, 92, break_on_hyphens=False, break_long_words=False), ""]
    return lines[:-1]


def epochs_text(budget, results, data):
    """How many epochs the budget is: measured batches per epoch at its batch size."""
    per_epoch = _any(results, "updates_per_epoch")
    if per_epoch is None and data:
        per_epoch = data.get("batches_per_epoch", {}).get(str(budget.max_tokens))
    if not per_epoch:
        return "epochs: measured when the data is prepared"
    return f"{budget.updates / per_epoch:.1f} epochs; an epoch is {per_epoch:,} batches"


def precision_text(results):
    """What our models trained in, from the results; the rule before there are any."""
    ours = sorted({r["options"]["precision"] for (n, _), r in results.items()
                   if n in ROWS and ROWS[n].arch != "lstm"})  # fmt: skip
    rule = "bf16 where the machine has native bf16, else fp32, as `make demo` picks"
    return f"{' and '.join(ours)} ({rule})" if ours else rule


def sitting_text(results):
    """The sitting the results record: commits, finish times, threads and jobs per run."""
    if not results:
        return "**Sitting.** Each row and seed records its commit and finish time when it has run."
    by_commit = {}
    for r in results.values():
        by_commit.setdefault(r.get("commit") or "not recorded", []).append(
            (r.get("finished") or "not recorded")[:16]
        )
    runs = "; ".join(
        f"at commit {commit}, {len(times)} of them finished "
        + (f"{min(times)} to {max(times)[11:]}" if min(times) != max(times) else min(times))
        for commit, times in sorted(by_commit.items(), key=lambda kv: min(kv[1]))
    )

    def kinds(key):
        return " or ".join(str(v) for v in sorted({r[key] for r in results.values() if key in r}))

    machines = kinds("machine")
    where = f"on {machines}" if machines else "on one machine (the files do not name it)"
    return (
        "**Sitting.** Each row × seed file records its commit and when it finished: "
        f"{runs}; {kinds('threads') or '?'} thread per run, {kinds('jobs_at_once') or '?'} "
        f"runs at a time, {where}."
    )


def intro_lines(budget, results, data):
    tok_sig, sacre_sig = _signatures(results)
    b = budget
    return [
        "# Results: the papers' ladders at CPU scale, word level",
        "",
        *wrap(
            "Rendered by `make ladder` (`python -m experiments.ladder`) from the JSON "
            "files in `docs/experiments/ladder/`, one per row and seed, each written the moment "
            "that row and seed finished; `python -m experiments.ladder --render-only` "
            "rewrites this page and the plot from those files alone. Rows not yet run are "
            "listed under [Runs](#runs).",
            sitting_text(results),
            f"**Budget, the same for every model:** {b.updates:,} updates of at most "
            f"{b.max_tokens:,} tokens ({epochs_text(b, results, data)}), Adam (lr {b.lr:g}, "
            "betas 0.9 / 0.999), gradient norm clipped at 1, cross-entropy, 1 layer of "
            f"{b.dim} units with {b.dim}-dimensional embeddings (Bahdanau's maxout: "
            f"{b.dim // 2}); each arch keeps its paper settings as its row says (source "
            "reversal, dropout 0.2, input feeding, window D = 10 words), and local-p trains "
            "with `--position-logit-bound 4` (under Adam eq. (9)'s sigmoid saturates without "
            f"it: docs/MODELS.md). Validation every {b.validate_every} updates; the best "
            f"checkpoint is decoded with beam 5. Our models train in {precision_text(results)}"
            "; fairseq's `lstm` in fp32 (fairseq cannot train bf16 on a CPU). Two "
            "seeds per row. The papers train 4 × 1000 LSTMs (Luong) and 1000-unit GRUs "
            "(Bahdanau) on 4.5M / 12M pairs with 50K / 30K words for 10–12 epochs or 5 days.",
            "**Scores.** *BLEU (tok.)* is the papers' metric: multi-bleu.perl on Moses-tokenised "
            "text (corpus BLEU-4 on the tokens, no smoothing), hypotheses with their `<unk>`s; "
            "*sacreBLEU* scores the detokenised output against the raw reference. *Ppl* is the "
            "best validation perplexity per word, `<unk>` a word as in the papers. Cells are "
            "`mean (seed 1 / seed 2)`."
            + (f" Signatures: `{tok_sig}` (tok.), `{sacre_sig}` (sacreBLEU)." if tok_sig else ""),
            "**When a step counts as shown.** A step's gain is the difference of the mean BLEU "
            "(tok.) of its two rows; it counts as shown only when it exceeds the spread "
            "(highest minus lowest seed) of both rows. A gain equal to a spread is not shown, "
            "and a loss beyond both spreads is marked as worse.",
            "The paper columns are Luong et al. (2015) on WMT'14 English→German newstest2014 and "
            "Bahdanau et al. (2015) on WMT'14 English→French newstest2014, tokenised BLEU: "
            "another language pair at a scale thousands of times larger. Compare the *steps*, "
            "not the values.",
        ),
    ]


def data_lines(budget, data):
    lines = [
        "",
        "## Data",
        "",
        *wrap(
            "The Spanish→English Bible of `recipes/bible_es_en/prepare.sh` (whole chapters "
            "held out for the valid and test verses) at word level, as the papers train "
            "(`luong_plugin/corpora/bible_words.py`, through the WMT recipes' `wmt.prepare`): "
            "Moses tokenisation (sacremoses, aggressive hyphen splitting), training pairs with "
            "a side over 50 words dropped, the top K words of each language plus `<unk>`, the "
            "test set kept as text for `--replace-unk`."
        ),
    ]
    if not data:
        return lines + ["", "(`data.json` is written when `make ladder` prepares the data.)"]
    p = data["prepare"]
    lines += [""] + wrap(
        f"{p['train_kept']:,} of {p['train_pairs']:,} training pairs kept, "
        f"{p['valid_pairs']:,} valid and {p['test_pairs']:,} test pairs. K = {p['vocab']:,} "
        "was chosen for a few percent of `<unk>` in the test set, measured for several K:"
    )
    lines += [
        "",
        "| K | `<unk>` in test: es | en | both | in training: es | en |",
        "|---|---|---|---|---|---|",
    ]
    for row in data["unk_rates"]:
        k = f"{row['vocab']:,}"
        k = f"**{k}** (the ladder)" if row["vocab"] == p["vocab"] else k
        rates = [row[key] for key in ("test_es", "test_en", "test_both", "train_es", "train_en")]
        lines.append(f"| {k} | " + " | ".join(f"{100 * x:.2f}%" for x in rates) + " |")
    row = data["unk_rates"][0]
    return (
        lines
        + [""]
        + wrap(
            "The English (target) side is the one unk replacement repairs. The Spanish training "
            f"side has {row['train_types_es']:,} word types against English's "
            f"{row['train_types_en']:,} in the same verses, so the same K leaves it more `<unk>`s."
        )
        + copyable_lines(data)
    )


def copyable_lines(data):
    c = data.get("copyable_unks")
    if not c:
        return []
    share = c["in_reference"] / max(c["test_source_unk"], 1)
    return [""] + wrap(
        f"Of the {c['test_source_unk']:,} tokens of the tokenised Spanish test side outside the "
        f"vocabulary, {c['in_reference']:,} ({100 * share:.1f}%) appear verbatim in their "
        "English reference: the most that replacing `<unk>` by copying the aligned source word "
        "can repair."
    )


def runs_lines(results, todo, other, out, plot_path, has_plot):
    plot_link = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(out)))
    lines = ["", "## Runs", ""]
    if has_plot:
        lines += [f"![tokenised BLEU per row, both seeds and the mean]({plot_link})", ""]
    done = len(results)
    lines.append(f"{done} of {done + len(todo) + len(other)} row × seed runs done.")
    if results:
        lines += [
            "",
            "| row | seed | updates | epochs | train wall (s) | s / 100 updates | precision "
            "| `<unk>` in output | commit | finished |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        order = {n: i for i, n in enumerate(NAMES)}
        for (name, seed), r in sorted(results.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
            s = r["scores"]["plain"]
            unk = f"{100 * s['unk_in_output'] / max(s['output_tokens'], 1):.2f}%"
            if name == ENSEMBLE:
                cells = [
                    "",
                    "",
                    "",
                    "",
                    r["options"]["members"][r["members"][0]]["options"]["precision"],
                ]
            else:
                cells = [f"{r['updates']:,}", f"{r['epochs']}", f"{r['train_wall_s']:.0f}",
                         f"{r['s_per_100_updates']:.0f}", r["options"]["precision"]]  # fmt: skip
            lines.append(f"| `{name}` | {seed} | {' | '.join(cells)} | {unk} | {r['commit']} | "
                         f"{r['finished']} |")  # fmt: skip
    if todo:
        lines += ["", *wrap(f"**Still to run:** {by_row(todo)}.")]
    if other:
        lines += ["", *wrap("**Results with other options, not shown** (the ladder trains "
                            f"these again): {by_row(other)}.")]  # fmt: skip
    return lines


def by_row(pairs):
    """[(row, seed)] -> "`a` (seeds 1, 2), `b` (seed 2)", rows in the given order."""
    seeds = {}
    for name, seed in pairs:
        seeds.setdefault(name, []).append(str(seed))
    return ", ".join(
        f"`{name}` (seed{'s' if len(s) > 1 else ''} {', '.join(s)})" for name, s in seeds.items()
    )


READING = "reading.md"


def reading_lines(results_dir, out):
    """``RESULTS/reading.md``, written by hand from the tables once their rows have run:
    what each step's result suggests where the spread rule does not show the paper's
    direction. None before it exists."""
    path = os.path.join(results_dir, READING)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        text = f.read().strip()
    link = os.path.relpath(path, os.path.dirname(os.path.abspath(out)))
    return ["", "## Reading the steps", "",
            f"Written by hand from the tables above ([{READING}]({link})).", "", text]  # fmt: skip


def notes_lines(results):
    lines = ["", "## Notes", ""]
    unk = [(r["scores"]["plain"]["unk_in_output"], r["scores"]["plain"]["output_tokens"])
           for r in results.values()]  # fmt: skip
    if unk:
        share = 100 * sum(u for u, _ in unk) / max(sum(t for _, t in unk), 1)
        lines += [
            f"- `<unk>` is {share:.2f}% of all test output tokens of the rows above; unk",
            "  replacement changes only those tokens, so its gain is bounded by them.",
        ]
    looked_up = [r["scores"]["unk_dict"] for r in results.values() if "unk_dict" in r["scores"]]
    if looked_up:
        replaced = sum(s["replaced"] for s in looked_up)
        changed = sum(s["changed_by_dictionary"] for s in looked_up)
        lines += [
            f"- Of the {replaced:,} `<unk>`s the dictionary decodings replaced, the dictionary",
            f"  gave {changed:,} a word other than the copied source word.",
        ]
    lines += [
        "- Unk replacement (Luong §4.1; `fairseq-generate --replace-unk`, `--print-alignment`)",
        "  replaces each `<unk>` of the output by the source word the model attends to most:",
        "  *copy* puts that word itself, *dictionary* first looks it up in `luong-unk-dict`'s",
        "  dictionary, learned from the model's own alignments of the training pairs (each",
        "  source word → its most often aligned target word), and copies words it lacks.",
        "  The ensemble's dictionary is that of its local-p (general) member of the same seed.",
        "- Wall times depend on what else the machine ran (see the jobs and threads in each",
        "  JSON); compare rows of one run of the ladder, not machines.",
    ]
    return lines
