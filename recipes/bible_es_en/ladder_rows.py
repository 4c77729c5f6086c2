"""What ladder.py trains, row by row, and the papers' numbers it prints beside ours."""

# name: (arch, extra training options, label)
LUONG = {
    "base": ("luong_base_wmt_en_de", [], "Base"),
    "base_reverse": ("luong_base_reverse_wmt_en_de", [], "Base + reverse"),
    "base_reverse_dropout": (
        "luong_base_reverse_dropout_wmt_en_de",
        [],
        "Base + reverse + dropout",
    ),
    "global_location_no_feed": (
        "luong_global_location_no_feed_wmt_en_de",
        [],
        "Base + reverse + dropout + global attention (location)",
    ),
    "global_location": (
        "luong_global_location_wmt_en_de",
        [],
        "Base + reverse + dropout + global attention (location) + feed input",
    ),
    "local_p_general": (
        "luong_local_p_general_wmt_en_de",
        [],
        "Base + reverse + dropout + local-p attention (general) + feed input",
    ),
    "global_dot": ("luong_global_dot_wmt_en_de", [], "global (dot)"),
    "global_general": ("luong_global_general_wmt_en_de", [], "global (general)"),
    "local_m_dot": ("luong_local_m_dot_wmt_en_de", [], "local-m (dot)"),
    "local_m_general": ("luong_local_m_general_wmt_en_de", [], "local-m (general)"),
    "local_p_dot": ("luong_local_p_dot_wmt_en_de", [], "local-p (dot)"),
    # ablation: eq. (9) trained without the bound saturates (docs/MODELS.md, "Saturation of p_t")
    "local_p_general_plain": (
        "luong_local_p_general_wmt_en_de",
        ["--position-logit-bound", "0"],
        "local-p (general), without --position-logit-bound",
    ),
}
BAHDANAU = {
    "rnnencdec": ("bahdanau_rnnencdec_wmt_en_fr", [], "RNNencdec"),
    "rnnsearch": ("bahdanau_rnnsearch_wmt_en_fr", [], "RNNsearch"),
}
PEER = {"fairseq_lstm": ("lstm", [], "fairseq `lstm` (general attention, input feeding)")}
# The models Table 1's ensemble combines: every attentional Luong model of the
# ladder (the paper ensembles 8 models "with different attention approaches").
ENSEMBLE = [
    "global_location",
    "local_p_general",
    "global_dot",
    "global_general",
    "local_m_dot",
    "local_m_general",
    "local_p_dot",
]

# The papers' numbers (WMT'14 En->De newstest2014 for Luong; WMT'14 En->Fr
# newstest2014 for Bahdanau), for the tables' "paper" columns.
PAPER_TABLE1 = {  # Luong et al. Table 1: (ppl, BLEU)
    "base": ("10.6", "11.3"),
    "base_reverse": ("9.9", "12.6"),
    "base_reverse_dropout": ("8.1", "14.0"),
    "global_location_no_feed": ("7.3", "16.8"),
    "global_location": ("6.4", "18.1"),
    "local_p_general": ("5.9", "19.0"),
    "unk": ("", "20.9"),
    "ensemble": ("", "23.0"),
}
PAPER_TABLE4 = {  # Luong et al. Table 4: (ppl, BLEU before, after unk replacement)
    "global_location": ("6.4", "18.1", "19.3"),
    "global_dot": ("6.1", "18.6", "20.5"),
    "global_general": ("6.1", "17.3", "19.1"),
    "local_m_dot": ("7.0", "x", "x"),
    "local_m_general": ("6.2", "18.6", "20.4"),
    "local_p_dot": ("6.6", "18.0", "19.6"),
    "local_p_general": ("5.9", "19", "20.9"),
}
TABLE4_LABELS = {"global_location": "global (location)", "local_p_general": "local-p (general)"}
PAPER_BAHDANAU = {  # Bahdanau et al. Table 1, -50 models: (All, No UNK)
    "rnnencdec": ("17.82", "26.71"),
    "rnnsearch": ("26.75", "34.16"),
}
