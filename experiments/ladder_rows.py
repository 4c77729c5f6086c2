"""What the ladder trains, row by row, and the papers' numbers it prints beside ours."""

from typing import NamedTuple, Tuple


class Row(NamedTuple):
    arch: str
    label: str
    extra: Tuple[str, ...] = ()  # training options beyond the arch and the budget
    attentional: bool = False  # a Luong model with attention: a member of the ensemble


def luong(arch, label, attentional=True):
    return Row(f"luong_{arch}_wmt_en_de", label, (), attentional)


# name: Row, in the order the ladder trains them (Table 1's steps first)
ROWS = {
    "base": luong("base", "Base", attentional=False),
    "base_reverse": luong("base_reverse", "Base + reverse", attentional=False),
    "base_reverse_dropout": luong(
        "base_reverse_dropout", "Base + reverse + dropout", attentional=False
    ),
    "global_location_no_feed": luong(
        "global_location_no_feed", "Base + reverse + dropout + global attention (location)"
    ),
    "global_location": luong(
        "global_location", "Base + reverse + dropout + global attention (location) + feed input"
    ),
    "local_p_general": luong(
        "local_p_general",
        "Base + reverse + dropout + local-p attention (general) + feed input",
    ),
    "global_dot": luong("global_dot", "global (dot)"),
    "global_general": luong("global_general", "global (general)"),
    "local_m_dot": luong("local_m_dot", "local-m (dot)"),
    "local_m_general": luong("local_m_general", "local-m (general)"),
    "local_p_dot": luong("local_p_dot", "local-p (dot)"),
    "rnnencdec": Row("bahdanau_rnnencdec_wmt_en_fr", "RNNencdec"),
    "rnnsearch": Row("bahdanau_rnnsearch_wmt_en_fr", "RNNsearch"),
    "fairseq_lstm": Row(
        "lstm",
        "fairseq `lstm` (global general attention, input feeding)",
        ("--decoder-attention", "True"),
    ),
    # the row beside fairseq's lstm that differs from global (general) in one setting:
    # the source read forward, as the demo and fairseq's lstm read it (not a paper row)
    "global_general_forward": Row(
        "luong_global_general_wmt_en_de",
        "global (general), source read forward (`--no-reverse-source`)",
        ("--no-reverse-source",),
    ),
}
# Table 1's last row: the 8 attentional Luong models of the ladder decoded together
# (the paper ensembles 8 models "with different attention approaches"); decoding only.
ENSEMBLE = "ensemble"
MEMBERS = [name for name, row in ROWS.items() if row.attentional]
# the dictionary the ensemble's <unk>s are looked up in: its best single system's
DICTIONARY_OF = "local_p_general"
NAMES = [*ROWS, ENSEMBLE]

TABLE1 = [
    "base",
    "base_reverse",
    "base_reverse_dropout",
    "global_location_no_feed",
    "global_location",
    "local_p_general",
]
TABLE4 = [
    "global_location",
    "global_dot",
    "global_general",
    "local_m_dot",
    "local_m_general",
    "local_p_dot",
    "local_p_general",
]
TABLE4_LABELS = {"global_location": "global (location)", "local_p_general": "local-p (general)"}
# decoded again with unk replacement (copy, and the learned dictionary): the rows
# whose "after unk replacement" the papers report
UNK_ROWS = TABLE4
BAHDANAU = ["rnnencdec", "rnnsearch"]
PEER = ["fairseq_lstm"]
# ours beside the peer: the paper's global (general), then the same reading forward
OURS_BESIDE_PEER = ["global_general", "global_general_forward"]

# The papers' numbers: Luong et al. on WMT'14 English->German newstest2014, Bahdanau
# et al. on WMT'14 English->French newstest2014; both tokenised BLEU (multi-bleu.perl).
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
PAPER_BAHDANAU = {  # Bahdanau et al. Table 1, -50 models: (All, No UNK)
    "rnnencdec": ("17.82", "26.71"),
    "rnnsearch": ("26.75", "34.16"),
}
