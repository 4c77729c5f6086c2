"""The runs of the per-update comparison (experiments/compare.py), each named by the
one thing it changes; bf16_parts.py and trajectory.py train some of them too."""

# demo.sh's model sizes (luong_recommended's) and optimisation, without the languages
SIZES = [
    "--encoder-layers", "1", "--decoder-layers", "1",
    "--encoder-embed-dim", "256", "--encoder-hidden-size", "256",
    "--decoder-embed-dim", "256", "--decoder-hidden-size", "256",
    "--decoder-out-embed-dim", "256",
    "--share-decoder-input-output-embed", "--dropout", "0.2",
]  # fmt: skip
OPTIMISATION = [
    "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--lr", "0.003",
    "--clip-norm", "1.0",
    "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
    "--max-tokens", "2000", "--num-workers", "0",
]  # fmt: skip
# demo.sh's TRAIN_ARGS without the budget, the save directory and the seed
RECIPE = ["--source-lang", "es", "--target-lang", "en", *SIZES, *OPTIMISATION]
# ours train in bf16 as the demo does (the fp32 rows of COMPARE.md show what it changes);
# fairseq's `lstm` cannot, and trains in fp32
BF16 = ["--precision", "bf16"]
GLOBAL = [
    "--arch", "luong_wmt_en_de", "--attention-window", "global",
    "--attention-score", "general", "--input-feeding", *BF16,
]  # fmt: skip
LOCAL_P = [
    "--arch", "luong_wmt_en_de", "--attention-window", "local-p",
    "--attention-score", "general", "--window-size", "10",
    "--position-logit-bound", "4", "--input-feeding", *BF16,
]  # fmt: skip

# name: (what it changes, options after RECIPE); every run names all the options
# it compares, so a later change of a default does not change a run's meaning
OURS = {
    "eos-first": ["--reverse-source", "--reverse-source-eos", "--attend-source-eos"],
    "rev-words": ["--reverse-source", "--no-reverse-source-eos", "--attend-source-eos"],
    "forward": ["--no-reverse-source", "--attend-source-eos"],
    "luong-layout": ["--reverse-source", "--no-reverse-source-eos", "--no-attend-source-eos"],
    "zaremba": ["--dropout-placement", "zaremba"],
    "luong": ["--dropout-placement", "luong"],
    "fairseq": ["--dropout-placement", "fairseq"],
}
RUNS = {
    "lstm": ("fairseq's `lstm` (the peer)", ["--arch", "lstm", "--decoder-attention", "True"]),
    "global-rev-eos-first": (
        "global, reversed with `</s>` first, Zaremba dropout (the plugin before this table)",
        GLOBAL + OURS["eos-first"] + OURS["zaremba"],
    ),
    "global-rev-words": (
        "global, words reversed, `</s>` last",
        GLOBAL + OURS["rev-words"] + OURS["zaremba"],
    ),
    "global-forward": ("global, not reversed", GLOBAL + OURS["forward"] + OURS["zaremba"]),
    "global-forward-fairseq-dropout": (
        "global, not reversed, fairseq's dropout placement",
        GLOBAL + OURS["forward"] + OURS["fairseq"],
    ),
    "global-forward-luong-dropout": (
        "global, not reversed, Luong's dropout placement",
        GLOBAL + OURS["forward"] + OURS["luong"],
    ),
    "local-p-rev-eos-first": (
        "local-p, reversed with `</s>` first, Zaremba dropout (the demo before this table)",
        LOCAL_P + OURS["eos-first"] + OURS["zaremba"],
    ),
    "global-luong": (
        "global, Luong's code: words reversed, `</s>` not attended, Luong's dropout",
        GLOBAL + OURS["luong-layout"] + OURS["luong"],
    ),
    "local-p-luong": (
        "local-p, Luong's code: words reversed, `</s>` not attended, Luong's dropout",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"],
    ),
    "local-p-luong-lr0.1": (
        "`local-p-luong`, `--position-lr-scale 0.1`",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"] + ["--position-lr-scale", "0.1"],
    ),
    "local-p-luong-renorm": (
        "`local-p-luong`, `--renormalize-window`",
        LOCAL_P + OURS["luong-layout"] + OURS["luong"] + ["--renormalize-window"],
    ),
    "local-p-forward-renorm": (
        "`local-p-luong-renorm`, not reversed",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window"],
    ),
    "global-forward-luong": (
        "global, not reversed, `</s>` not attended, Luong's dropout (`local-p-forward-renorm`'s"
        " settings)",
        GLOBAL + ["--no-reverse-source", "--no-attend-source-eos"] + OURS["luong"],
    ),
    "global-forward-luong-fp32": (
        "`global-forward-luong` in fp32",
        [o if o != "bf16" else "fp32" for o in GLOBAL]
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"],
    ),
    "global-forward-luong-fgb1": (
        "`global-forward-luong` with `--forget-gate-bias 1`",
        GLOBAL
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1": (
        "`local-p-forward-renorm` with `--forget-gate-bias 1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1-sigma10": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 10` (σ = D, the paper's D/2 = 5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "10"],
    ),
    "local-p-forward-renorm-fgb1-sigma20": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 20` (σ = 2D)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "20"],
    ),
    "local-p-forward-renorm-fgb1-sigma3.5": (
        "`local-p-forward-renorm-fgb1` with `--position-sigma 3.5` (narrower than D/2 = 5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-sigma", "3.5"],
    ),
    "local-p-forward-renorm-fgb1-d7": (
        "`local-p-forward-renorm-fgb1` with D = 7 pieces (σ = D/2 = 3.5)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--window-size", "7"],
    ),
    "local-p-forward-renorm-fgb1-detach": (
        "`local-p-forward-renorm-fgb1` with `--position-detach-query`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--position-detach-query"],
    ),
    "local-p-forward-renorm-fgb1-d14-sigma5": (
        "`local-p-forward-renorm-fgb1` with D = 14 and `--position-sigma 5` (the Gaussian of D = 10)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--forget-gate-bias", "1", "--window-size", "14"]
        + ["--position-sigma", "5"],
    ),
    "local-p-forward": (
        "`local-p-forward-renorm` without `--renormalize-window` (the paper's eq. (10))",
        LOCAL_P + ["--no-reverse-source", "--no-attend-source-eos"] + OURS["luong"],
    ),
    "local-p-forward-renorm-d14": (
        "`local-p-forward-renorm` with D = 14 pieces (the paper's 10 words, in pieces)",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "14"],
    ),
    "local-p-forward-renorm-whole": (
        "`local-p-forward-renorm` with D = 200: a window and a Gaussian wider than any verse",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "200"],
    ),
    "local-m-forward": (
        "local-m (general), D = 10, with `global-forward-luong`'s conventions",
        ["--arch", "luong_wmt_en_de", "--attention-window"]
        + [
            "local-m",
            "--attention-score",
            "general",
            "--window-size",
            "10",
            "--input-feeding",
            "--no-reverse-source",
            "--no-attend-source-eos",
            *BF16,
        ]
        + OURS["luong"],
    ),
    "local-m-forward-fgb1-d14": (
        "`local-m-forward` with `--forget-gate-bias 1` and D = 14 (the window of `make demo`)",
        ["--arch", "luong_wmt_en_de", "--attention-window", "local-m"]
        + ["--attention-score", "general", "--window-size", "14", "--input-feeding", *BF16]
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-fgb1-whole": (
        "`local-p-forward-renorm-whole` with `--forget-gate-bias 1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--window-size", "200", "--forget-gate-bias", "1"],
    ),
    "local-p-forward-renorm-lr0.1": (
        "`local-p-forward-renorm`, `--position-lr-scale 0.1`",
        LOCAL_P
        + ["--no-reverse-source", "--no-attend-source-eos"]
        + OURS["luong"]
        + ["--renormalize-window", "--position-lr-scale", "0.1"],
    ),
}
