"""The systems the benchmark compares, as fairseq command lines, and how to
build them (task, model, criterion) in this process.

Every system has the demo's size (1 layer x 256, 8K joint vocabulary, shared
decoder input/output embedding) so ours and fairseq's ``lstm`` compare flag
for flag. Dropout and the criterion are chosen per run (``common_args``) and
are the same for every system.
"""

from dataclasses import dataclass
from typing import List, Sequence, Tuple


def sizes(layers: int, dim: int) -> List[str]:
    """The size flags both toolkits share: ``layers`` x ``dim`` LSTMs, shared embeddings."""
    return [
        "--encoder-layers", str(layers), "--decoder-layers", str(layers),
        "--encoder-embed-dim", str(dim), "--encoder-hidden-size", str(dim),
        "--decoder-embed-dim", str(dim), "--decoder-hidden-size", str(dim),
        "--decoder-out-embed-dim", str(dim),
        "--share-decoder-input-output-embed",
    ]  # fmt: skip


SIZES = sizes(1, 256)

BF16 = " [bf16]"  # the suffix of a system run with --precision bf16


def split(name: str) -> Tuple[str, List[str]]:
    """(the system's name, the extra model options) of a name that may end in BF16."""
    if name.endswith(BF16):
        return name[: -len(BF16)], ["--precision", "bf16"]
    return name, []


# fairseq's own Luong-style model: global "general" attention
# (h_t W h̄_s, its AttentionLayer.input_proj), input feeding, unidirectional encoder.
FAIRSEQ_LSTM = ["--arch", "lstm", "--decoder-attention", "True"]

# Ours; a source read left to right, like fairseq's lstm encoder.
LUONG = ["--arch", "luong_wmt_en_de", "--no-reverse-source"]


@dataclass(frozen=True)
class System:
    name: str  # a short label for tables
    args: Sequence[str]  # model options (sizes are added)
    description: str
    step_by_step: bool = False  # run the decoder's per-step path (luong_loop.per_step_features)
    fused_loss: bool = False  # train with --criterion fused_label_smoothed_cross_entropy

    @property
    def is_reference(self) -> bool:
        return self.name == REFERENCE


REFERENCE = "fairseq lstm"
FUSED = ", fused loss"  # the suffix of a system trained with the fused loss


def _luong(window: str, score: str, feed: bool, *extra: str) -> List[str]:
    return LUONG + [
        "--attention-window", window, "--attention-score", score,
        "--input-feeding" if feed else "--no-input-feeding", *extra,
    ]  # fmt: skip


SYSTEMS = [
    System(REFERENCE, FAIRSEQ_LSTM, "fairseq `--arch lstm`: global general attention, input feeding"),
    System(REFERENCE + FUSED, FAIRSEQ_LSTM, "fairseq's lstm trained with our fused loss", fused_loss=True),
    System("global-general feed", _luong("global", "general", True), "ours, the same model as fairseq lstm"),
    System("global-general feed" + FUSED, _luong("global", "general", True), "the same, trained with the fused loss", fused_loss=True),
    System("global-general", _luong("global", "general", False), "ours without input feeding (fused LSTM path)"),
    System("global-general per-step", _luong("global", "general", False), "the same no-feed model forced through the per-step loop", step_by_step=True),
    System("global-general" + FUSED, _luong("global", "general", False), "the fused LSTM path, trained with the fused loss", fused_loss=True),
    System("global-general per-step" + FUSED, _luong("global", "general", False), "the per-step loop, trained with the fused loss", step_by_step=True, fused_loss=True),
    System("global-dot feed", _luong("global", "dot", True), "ours"),
    System("global-concat feed", _luong("global", "concat", True), "ours"),
    System("global-location feed", _luong("global", "location", True), "ours"),
    System("local-m general feed", _luong("local-m", "general", True, "--window-size", "10"), "ours, D = 10"),
    System("local-p general feed", _luong("local-p", "general", True, "--window-size", "10", "--position-logit-bound", "4", "--renormalize-window"), "ours, D = 10, bound 4, renormalised (the demo's model at D = 10; its D = 14 does the same work in training at the demo's lengths)"),
    System("local-p general", _luong("local-p", "general", False, "--window-size", "10"), "ours, D = 10, no input feeding"),
    System("base", LUONG + ["--attention-window", "none", "--no-input-feeding"], "ours, no attention (Table 1 Base)"),
]  # fmt: skip

QUICK_SYSTEMS = [
    REFERENCE,
    "global-general feed",
    "global-general feed" + FUSED,
    "global-general",
    "local-p general feed",
]


def system(name: str) -> System:
    for s in SYSTEMS:
        if s.name == name:
            return s
    raise KeyError(f"unknown system {name!r}; known: {', '.join(s.name for s in SYSTEMS)}")


FUSED_CRITERION = "fused_label_smoothed_cross_entropy"


def with_criterion(common: Sequence[str], criterion: str) -> List[str]:
    """``common`` with its ``--criterion`` replaced (its other flags stay)."""
    args = list(common)
    args[args.index("--criterion") + 1] = criterion
    return args


def common_args(data: str, dropout: float, criterion: str, max_tokens: int) -> List[str]:
    """Task, criterion, dropout and batching shared by every system."""
    args = [
        data, "--task", "translation", "--source-lang", "es", "--target-lang", "en",
        "--dropout", str(dropout), "--max-tokens", str(max_tokens),
        "--criterion", criterion, "--optimizer", "adam", "--lr", "0.001",
        "--seed", "1", "--num-workers", "0", "--cpu",
    ]  # fmt: skip
    if criterion in ("label_smoothed_cross_entropy", FUSED_CRITERION):
        args += ["--label-smoothing", "0.1"]
    return args


# The paper's shape (4 x 1000 LSTMs, Luong's global-general + feeding) on the same data.
PAPER_SIZES = sizes(4, 1000)


def build(system_args: Sequence[str], common: Sequence[str], user_dir: str, sizes=SIZES):
    """(args, task, model, criterion) exactly as fairseq-train builds them."""
    from fairseq import options, tasks

    parser = options.get_training_parser()
    argv = list(common) + ["--user-dir", user_dir] + list(sizes) + list(system_args)
    args = options.parse_args_and_arch(parser, argv)
    task = tasks.setup_task(args)
    model = task.build_model(args)
    criterion = task.build_criterion(args)
    return args, task, model, criterion
