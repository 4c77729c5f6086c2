"""Finished equal-time runs decoded again: fairseq's length penalty chosen on the valid split.

    python -m experiments.length_penalty --budget-results DIR [--corpora ...] [--runs ...]
        [--seeds 1 2] [--lenpens 0.6 1 1.4 1.8 2.2 2.6 3] [--jobs 2] [--results DIR] [--out PAGE]
        [--render-only]

experiments/corpus_budget decodes every run's best checkpoint with beam 5 and fairseq's
``--lenpen 1``: a finished hypothesis scores its log-probability over its length to the
power 1, and a larger power favours longer ones. Where one model's translations come out
shorter than another's, that one setting may decide which scores higher. This study takes
the runs of one corpus_budget sitting (their JSONs under ``--budget-results``, their
checkpoints in corpus_budget's run folders), and for each:

- decodes the valid split with beam 5 at every ``--lenpens`` value, and with beam 1
  (greedy, no length penalty at work), scoring each with sacreBLEU and chrF2 and BLEU's
  length ratio;
- reads the model teacher-forced on the valid references (``eos_profile``): the probability
  it gives </s> before each reference ends, summed per sentence and averaged, and the mean
  log-probability of </s> where it ends; and where the attention (and local-p's p_t) stood
  when it gave </s> early: at the source's end or before it;
- chooses the value with the highest valid sacreBLEU (a tie goes to the value nearest 1,
  then to the smaller);
- decodes the test split at that value, and at 1 as a check that it repeats the
  sitting's score.

The checkpoint must be the one the sitting's JSON decoded (its update is compared). Each
finished run writes ``docs/experiments/length_penalty/CORPUS/NAME.seedK.json``
(``--results`` elsewhere) and the page is rendered again; a run whose JSON has the same
values and sitting JSON and the forced reading is skipped, and a decoding whose output is whole and newer than the
checkpoint is read again rather than redone (so a longer ``--lenpens`` decodes only the
values it adds). Decoding is not timed, so other work may run beside it.
"""

import argparse
import os
import subprocess
import textwrap
import threading
import time

from experiments import corpus_budget, harness
from luong_plugin.analysis.lenpen import choose as choose_lenpen
from luong_plugin.analysis.lenpen import scores as lenpen_scores
from luong_plugin.analysis.lenpen import whole_decoding

RESULTS = harness.results_dir("length_penalty")
_forced_lock = threading.Lock()  # runs go on threads; one model read in this process at once
PAGE = os.path.join(harness.REPO, "docs", "LENGTH_PENALTY.md")
LENPENS = [0.6, 1.0, 1.4, 1.8, 2.2, 2.6, 3.0]  # the recipes' (lenpen.LENPENS) and 2.6 and 3
DEFAULT_RUNS = ["local-p", "global"]
# corpus_budget's decoding (demo.sh's beam 5, every sentence) without the alignments,
# which change no hypothesis
DECODE = ["--batch-size", "64", "--required-batch-size-multiple", "1"]


def results_dir(corpus: str, root: str = RESULTS) -> str:
    return os.path.join(root, corpus)


def sitting_json(corpus: str, name: str, seed: int, budget_results: str) -> str:
    """The corpus_budget sitting's JSON of one run (``budget_results``: its --results)."""
    return harness.result_path(corpus_budget.results_dir(corpus, budget_results), name, seed)


def checkpoint_update(path: str) -> int:
    """The update a fairseq checkpoint was saved at."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    return state["optimizer_history"][-1]["num_updates"]


def finished(out: str, checkpoint: str) -> bool:
    """Whether ``out`` holds a whole decoding by this checkpoint (the recipes' test,
    ``luong_plugin.analysis.lenpen.whole_decoding``)."""
    return whole_decoding(out, checkpoint)


def decoded(corpus: str, checkpoint: str, split: str, beam: int, lenpen: float, out: str, python):
    """Decode ``split`` with ``checkpoint``; its scores against the raw reference."""
    _, data, src, tgt = corpus_budget.CORPORA[corpus]
    data = os.path.join(harness.REPO, data)
    cmd = [
        harness.WITH_TCMALLOC, os.path.join(os.path.dirname(python), "fairseq-generate"),
        os.path.join(data, "bin"), "--source-lang", src, "--target-lang", tgt,
        "--user-dir", harness.USER_DIR, "--path", checkpoint, "--gen-subset", split,
        "--beam", str(beam), "--lenpen", str(lenpen), *DECODE,
    ]  # fmt: skip
    if not finished(out, checkpoint):
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        with open(out, "w", encoding="utf-8") as f, open(out + ".log", "w") as log:
            code = subprocess.call(cmd, stdout=f, stderr=log, env=env, cwd=harness.REPO)
        if code != 0:
            raise RuntimeError(f"fairseq-generate failed (exit {code}): see {out}.log")
    with open(out, encoding="utf-8") as f:
        text = f.read()
    with open(os.path.join(data, "raw", f"{split}.{tgt}"), encoding="utf-8") as f:
        references = f.read().splitlines()
    try:
        return lenpen_scores(text, references)  # the recipes' scoring of a valid decoding
    except ValueError as error:
        raise RuntimeError(f"{out}: {error}") from None


# a step's attention is at the source's end when it stands in the last tenth of the source's
# positions (0 .. n - 1 for n pieces): at or past 0.9 (n - 1)
SOURCE_END = 0.9


def eos_profile(model, task, pairs, batch_size: int = 64) -> dict:
    """The model teacher-forced on each pair's reference (luong_plugin.analysis.forced: the
    layout it trained on): ``premature_eos``, the probability it gives </s> summed over the
    steps before the reference ends, averaged over the sentences (how strongly it would stop
    early), and ``end_eos_log_prob``, the mean log-probability of </s> where the reference
    ends.

    Where the attention stands at those early steps, for a model that returns its maps:
    the step's source position is the mean of the positions under its weights (0 .. n - 1
    for n source pieces; the source's </s>, where attended, is n), at the source's end from
    ``SOURCE_END`` (n - 1) on. ``premature_eos_at_source_end`` is the part of
    ``premature_eos`` (per sentence, averaged) given at such steps, the rest at steps whose
    attention is still before the source's end; ``early_steps_at_source_end`` the share of
    the early steps that are such steps. For local-p the same two by eq. (9)'s p_t
    (``..._p_t_...``), and ``p_t_behind_attention``, the attention's position minus p_t in
    pieces, averaged over the early steps.
    """
    import torch

    from luong_plugin.analysis import forced

    eos = task.target_dictionary.eos()
    pad = task.source_dictionary.pad()
    early, end = [], []
    steps = {"attention": [], "p_t": []}  # per early step: (P(</s>), at the end)
    behind = []  # per early step of local-p: attention's position - p_t
    # longest source first, so a batch holds sources of like lengths (forward_with_attention
    # itself orders the batch that fairseq's lstm packs)
    pairs = sorted(pairs, key=lambda pair: -len(pair.src_tokens))
    with torch.no_grad():
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            src_tokens, src_lengths, prev_output_tokens, _ = forced.collate(task, batch)
            logits, attn, p_t = forced.forward_with_attention(
                model, src_tokens, src_lengths, prev_output_tokens, pad
            )  # B x T x V, B x T x S or None, B x T or None
            eos_log_prob = model.get_normalized_probs((logits, None), log_probs=True)[..., eos]
            for b, pair in enumerate(batch):
                n = len(pair.tgt_tokens) - 1  # the reference's steps before its </s>
                p_early = eos_log_prob[b, :n].float().exp()  # n
                early.append(p_early.sum().item())
                end.append(eos_log_prob[b, n].item())
                if attn is None:
                    continue
                real = src_tokens[b].ne(pad)  # S: the sentence's columns, </s> last
                weights = attn[b, :n][:, real].double()  # n x (pieces + 1)
                positions = torch.arange(weights.size(1), dtype=torch.float64)
                position = (weights * positions).sum(1) / weights.sum(1)  # n
                # of pieces 0 .. S_b - 2: one piece is its source's end at every step
                last = max(weights.size(1) - 2, 0) * SOURCE_END
                steps["attention"] += zip(p_early.tolist(), (position >= last).tolist())
                if p_t is not None:
                    centre = p_t[b, :n].double()  # n
                    steps["p_t"] += zip(p_early.tolist(), (centre >= last).tolist())
                    behind += (position - centre).tolist()
    profile = {
        "premature_eos": round(sum(early) / len(early), 4),
        "end_eos_log_prob": round(sum(end) / len(end), 4),
        "sentences": len(early),
    }
    for by, infix in (("attention", ""), ("p_t", "_p_t")):  # None: no maps, or no p_t
        at_end = [p for p, there in steps[by] if there]
        profile[f"premature_eos{infix}_at_source_end"] = (
            round(sum(at_end) / len(early), 4) if steps[by] else None
        )
        profile[f"early_steps{infix}_at_source_end"] = (
            round(len(at_end) / len(steps[by]), 4) if steps[by] else None
        )
    profile["p_t_behind_attention"] = round(sum(behind) / len(behind), 3) if behind else None
    return profile


def forced_eos(corpus: str, checkpoint: str, split: str = "valid") -> dict:
    """``eos_profile`` of a checkpoint on a split of the corpus, in this process on one
    thread, one checkpoint at a time (the runs' decodings go on beside it)."""
    import torch

    from luong_plugin.analysis import forced

    _, data, src, tgt = corpus_budget.CORPORA[corpus]
    torch.set_num_threads(1)
    args = argparse.Namespace(
        path=checkpoint, data=os.path.join(harness.REPO, data, "bin"), source=None, target=None,
        gen_subset=split, spm_model=None, subword="auto", source_lang=src, target_lang=tgt,
    )  # fmt: skip
    with _forced_lock:
        models, task = forced.load_ensemble(args.path, args.data, src, tgt)
        return eos_profile(models[0], task, forced.read_pairs(args, task))


def choose(valid: dict) -> float:
    """The length penalty of the highest valid sacreBLEU, as the recipes choose it
    (``luong_plugin.analysis.lenpen.choose``: a tie goes to the one nearest 1, then to the
    smaller)."""
    return choose_lenpen({float(k): r["bleu"] for k, r in valid.items()})


def done(path: str, budget_json: str, lenpens) -> bool:
    r = harness.read_json(path)
    return (
        r is not None
        and r["lenpens"] == lenpens
        and r["budget_json"] == budget_json
        # JSONs written before the forced reading, or before where the attention stands in
        # it, lack them
        and "early_steps_at_source_end" in r.get("valid_forced", {})
    )


def one_run(corpus: str, name: str, seed: int, args) -> dict:
    budget_path = sitting_json(corpus, name, seed, args.budget_results)
    budget = harness.read_json(budget_path)
    label = f"{corpus} {name} seed {seed}"
    run_dir = corpus_budget.run_folder(corpus, name, seed)
    checkpoint = os.path.join(run_dir, "checkpoint_best.pt")
    if not os.path.exists(checkpoint):
        raise RuntimeError(f"{label}: no {checkpoint}")
    update = checkpoint_update(checkpoint)
    if update != budget["best_checkpoint"]["update"]:
        raise RuntimeError(f"{label}: {checkpoint} was saved at update {update}, "
                           f"{budget_path} decoded update {budget['best_checkpoint']['update']}: "
                           "the folder holds another run's model")  # fmt: skip
    out_dir = os.path.join(run_dir, "length_penalty")
    os.makedirs(out_dir, exist_ok=True)

    def decode(split, beam, lenpen):
        out = os.path.join(out_dir, f"{split}.beam{beam}.lenpen{lenpen:g}.txt")
        return decoded(corpus, checkpoint, split, beam, lenpen, out, args.python)

    started = time.strftime("%Y-%m-%d %H:%M")
    valid = {str(lp): decode("valid", 5, lp) for lp in args.lenpens}
    greedy = decode("valid", 1, 1.0)
    eos = forced_eos(corpus, checkpoint)
    chosen = choose(valid)
    test = {str(lp): decode("test", 5, lp) for lp in sorted({1.0, chosen})}
    if test["1.0"]["bleu"] != budget["bleu"]:
        raise RuntimeError(f"{label}: test at --lenpen 1 scores {test['1.0']['bleu']}, "
                           f"{budget_path} {budget['bleu']}")  # fmt: skip
    result = {
        "name": name, "corpus": corpus, "seed": seed, "lenpens": args.lenpens,
        "budget_json": os.path.relpath(budget_path, harness.REPO),
        "checkpoint_update": update, "budget_sitting": budget["started"],
        "valid": valid, "valid_greedy": greedy, "valid_forced": eos, "chosen_lenpen": chosen,
        "test": test,
        "started": started, "commit": harness.describe_commit(), "machine": harness.machine(),
    }  # fmt: skip
    harness.write_json(harness.result_path(results_dir(corpus, args.results), name, seed), result)
    return result


def render(path: str = PAGE, root: str = RESULTS) -> None:
    """The page, from the JSON files under ``root`` alone."""
    by_corpus = {c: harness.load_results(results_dir(c, root)) for c in corpus_budget.CORPORA}
    every = [r for results in by_corpus.values() for r in results.values()]
    paragraph = (
        f"Rendered by `python -m experiments.length_penalty` from "
        f"`{os.path.relpath(root, harness.REPO)}/CORPUS/*.json`. Each run is a finished run of "
        "an equal-time sitting of `experiments.corpus_budget` (its JSON is named in each file, "
        "`budget_json`), decoded again from the same best checkpoint: the valid split with "
        "beam 5 at each of fairseq's `--lenpen` values "
        f"({', '.join(f'{v:g}' for v in every[0]['lenpens']) if every else 'see the JSON'}; "
        "the sitting decoded with 1), and with beam 1. The value with the highest valid "
        "sacreBLEU is chosen, and the test split decoded with it; the test at 1 repeats the "
        "sitting's score (the study stops where it does not). `valid premature EOS, forced`: the "
        "model teacher-forced on each valid reference, the probability it gives the end of "
        "sentence (EOS) at the "
        "steps before the reference ends, summed per sentence and averaged (`valid_forced` in "
        "the JSON, with the mean log-probability of EOS where the reference ends). Length "
        "ratio: BLEU's, hypothesis "
        "over reference tokens. Cells are `mean (seed 1 / seed 2)`, the chosen values "
        "`seed 1 / seed 2`."
    )
    lines = [
        "# Equal-time runs decoded again: the length penalty chosen on the valid split",
        "",
        textwrap.fill(paragraph, 92),
    ]
    columns = [
        ("valid sacreBLEU, lenpen 1", lambda r: r["valid"]["1.0"]["bleu"], 2),
        ("valid length ratio, lenpen 1", lambda r: r["valid"]["1.0"]["length_ratio"], 3),
        ("valid length ratio, beam 1", lambda r: r["valid_greedy"]["length_ratio"], 3),
        (  # JSONs written before it was measured lack it
            "valid premature EOS, forced",
            lambda r: r.get("valid_forced", {}).get("premature_eos"),
            3,
        ),
        ("chosen lenpen", lambda r: r["chosen_lenpen"], None),
        ("valid sacreBLEU, chosen", lambda r: r["valid"][str(r["chosen_lenpen"])]["bleu"], 2),
        ("test sacreBLEU, lenpen 1", lambda r: r["test"]["1.0"]["bleu"], 2),
        ("test sacreBLEU, chosen", lambda r: r["test"][str(r["chosen_lenpen"])]["bleu"], 2),
        (
            "test length ratio, chosen",
            lambda r: r["test"][str(r["chosen_lenpen"])]["length_ratio"],
            3,
        ),
        ("test chrF2, chosen", lambda r: r["test"][str(r["chosen_lenpen"])]["chrf"], 2),
    ]
    for corpus, results in by_corpus.items():
        if not results:
            continue
        lines += [
            "",
            f"## `{corpus}`",
            "",
            f"JSONs written: {harness.sittings(results)}. The sitting's runs: "
            + ", ".join(sorted({f"`{os.path.dirname(r['budget_json'])}/`"
                                for r in results.values()}))  # fmt: skip
            + f". Data: `{os.path.relpath(results_dir(corpus, root), harness.REPO)}/`.",
            "",
            "| run | " + " | ".join(title for title, _, _ in columns) + " |",
            "|---|" + "---|" * len(columns),
        ]
        by_run = {  # name -> {seed: result}, in RUNS order
            name: {s: r for (n, s), r in results.items() if n == name}
            for name in corpus_budget.RUNS
            if any(n == name for n, _ in results)
        }
        for name, mine in by_run.items():
            cells = [
                (
                    harness.seed_cell(
                        {s: get(r) for s, r in mine.items() if get(r) is not None}, d, empty="–"
                    )
                    if d is not None  # a mean of the chosen values would be no one's choice
                    else " / ".join(f"{get(mine[s]):g}" for s in sorted(mine))
                )
                for _, get, d in columns
            ]
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
        lines += where_early_eos(by_run)
        lines += ["", "Valid sacreBLEU at each length penalty (seed 1 / seed 2):", ""]
        values = sorted({float(v) for r in results.values() for v in r["valid"]})
        lines += [
            "| run | " + " | ".join(f"{v:g}" for v in values) + " |",
            "|---|" + "---|" * len(values),
        ]
        for name, mine in by_run.items():
            cells = [
                " / ".join(
                    (
                        harness.decimal_text(mine[s]["valid"][str(v)]["bleu"])
                        if str(v) in mine[s]["valid"]
                        else "–"
                    )
                    for s in sorted(mine)
                )
                for v in values
            ]
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    notes = os.path.join(root, corpus_budget.NOTES)
    if os.path.exists(notes):
        with open(notes, encoding="utf-8") as f:
            lines += ["", "## Notes", "", f"From `{os.path.relpath(notes, harness.REPO)}`:", ""]
            lines += [f.read().strip()]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def _before_end(forced: dict):
    at_end = forced.get("premature_eos_at_source_end")
    return None if at_end is None else round(forced["premature_eos"] - at_end, 4)


# the forced reading's columns of where the attention stands when EOS comes early
WHERE = [
    ("early EOS, attention before the source's end", _before_end, 3),
    ("early EOS, attention at the source's end", "premature_eos_at_source_end", 3),
    ("early steps with the attention at the source's end", "early_steps_at_source_end", 3),
    ("early EOS, p_t at the source's end", "premature_eos_p_t_at_source_end", 3),
    ("early steps with p_t at the source's end", "early_steps_p_t_at_source_end", 3),
    ("p_t behind the attention, pieces", "p_t_behind_attention", 2),
]


def where_early_eos(by_run: dict) -> list:
    """The table of where the attention stands at the early steps of the forced reading,
    for the runs whose JSON has it (``eos_profile``); none: no lines."""

    def value(r, get):
        forced = r.get("valid_forced", {})
        if "early_steps_at_source_end" not in forced:
            return None
        return get(forced) if callable(get) else forced[get]

    rows = []
    for name, mine in by_run.items():
        cells = []
        for _, get, d in WHERE:
            values = {s: value(r, get) for s, r in mine.items()}
            cells.append(harness.seed_cell({s: v for s, v in values.items() if v is not None},
                                           d, empty="–"))  # fmt: skip
        if any(cell != "–" for cell in cells):
            rows.append(f"| `{name}` | " + " | ".join(cells) + " |")
    if not rows:
        return []
    text = (
        "Where the attention stands when EOS comes early (the forced reading, valid split). A "
        "step's source position is the mean of the positions under its attention weights; "
        f"it is at the source's end from {SOURCE_END:g} of the last piece's position on (the "
        "source's last tenth). The first two columns split `valid premature EOS, forced` "
        "(per sentence) by where the attention stood when the model gave it; the third is "
        "the share of the steps before the reference's end whose attention stood at the "
        "source's end. For local-p the same by eq. (9)'s p_t, and the attention's position "
        "minus p_t, averaged over those steps."
    )
    return [
        "",
        textwrap.fill(text, 92),
        "",
        "| run | " + " | ".join(title for title, _, _ in WHERE) + " |",
        "|---|" + "---|" * len(WHERE),
        *rows,
    ]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    corpora = list(corpus_budget.CORPORA)
    # fmt: off
    p.add_argument("--budget-results", required=True,
                   help="the corpus_budget sitting's JSON folder (its --results)")
    p.add_argument("--corpora", nargs="+", default=corpora, choices=corpora, metavar="CORPUS",
                   help=f"of: {', '.join(corpora)}")
    p.add_argument("--runs", nargs="+", default=DEFAULT_RUNS, choices=list(corpus_budget.RUNS),
                   metavar="NAME", help=f"of: {', '.join(corpus_budget.RUNS)}")
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    p.add_argument("--lenpens", nargs="+", type=float, default=LENPENS,
                   help="fairseq --lenpen values tried on the valid split (1 among them)")
    p.add_argument("--jobs", type=int, default=2, help="runs decoded at once")
    p.add_argument("--python", default=harness.PYTHON)
    p.add_argument("--results", default=RESULTS, help="folder of the JSON results")
    p.add_argument("--out", default=PAGE)
    p.add_argument("--render-only", action="store_true")
    # fmt: on
    args = p.parse_args(argv)
    harness.at_least_one(p, args, ("jobs", "seeds"))
    for option in ("corpora", "runs", "seeds", "lenpens"):
        harness.each_once(p, f"--{option}", getattr(args, option))
    if 1.0 not in args.lenpens:
        p.error(f"--lenpens must include 1 (the sitting's), got {' '.join(map(str, args.lenpens))}")
    if not all(v >= 0 for v in args.lenpens):  # also refuses nan
        p.error(f"--lenpens must be >= 0, got {' '.join(map(str, args.lenpens))}")
    args.lenpens = sorted(args.lenpens)
    args.results = os.path.abspath(args.results)
    args.budget_results = os.path.abspath(args.budget_results)
    if not args.render_only:
        for corpus in args.corpora:
            for seed in args.seeds:
                for name in args.runs:
                    path = sitting_json(corpus, name, seed, args.budget_results)
                    if not os.path.exists(path):
                        p.error(f"--budget-results {args.budget_results}: no {path}")
    return args


def main(argv=None):
    args = parse_args(argv)
    if not args.render_only:
        every = [(c, n, s) for s in args.seeds for c in args.corpora for n in args.runs]

        def pending(run):
            corpus, name, seed = run
            budget = sitting_json(corpus, name, seed, args.budget_results)
            mine = harness.result_path(results_dir(corpus, args.results), name, seed)
            return not done(mine, os.path.relpath(budget, harness.REPO), args.lenpens)

        todo = [run for run in every if pending(run)]
        print(f"{len(todo)} runs to decode, {args.jobs} at once", flush=True)

        def one(numbered):
            i, (corpus, name, seed) = numbered
            print(f"[{i}/{len(todo)}] {corpus} {name} seed {seed}: starts "
                  f"({time.strftime('%H:%M')})", flush=True)  # fmt: skip
            r = one_run(corpus, name, seed, args)
            render(args.out, args.results)
            chosen = str(r["chosen_lenpen"])
            print(f"[{i}/{len(todo)}] {corpus} {name} seed {seed}: lenpen {chosen} chosen, test "
                  f"sacreBLEU {r['test']['1.0']['bleu']} -> {r['test'][chosen]['bleu']} "
                  f"({time.strftime('%H:%M')})", flush=True)  # fmt: skip

        harness.run_all(one, list(enumerate(todo, 1)), args.jobs)
    render(args.out, args.results)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
