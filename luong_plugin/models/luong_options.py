"""The options of the fairseq model ``luong`` (models/luong.py): ``LuongConfig``, the
dataclass fairseq parses the command line into, with the paper's best single system as its
defaults, and ``validate``, the checks across options that one field's type cannot make
(each error names the options and the values allowed).
"""

from dataclasses import dataclass, field, fields

from fairseq.dataclass import ChoiceEnum, FairseqDataclass

from ..modules.options import VALUE_RULES, OptionError, check_values, lookup, option_name
from ..modules.precision import compute_dtype
from ..modules.scores import SCORES
from ..modules.windows import POSITION_SCALES, WINDOWS
from .config import PrecisionChoice, precision_field

ScoreChoice = ChoiceEnum(list(SCORES))
DropoutPlacement = ChoiceEnum(["zaremba", "luong", "fairseq"])
WindowChoice = ChoiceEnum(["none"] + list(WINDOWS))
PositionScaleChoice = ChoiceEnum(list(POSITION_SCALES))


@dataclass
class LuongConfig(FairseqDataclass):
    encoder_embed_dim: int = field(default=1000, metadata={"help": "source embedding dim"})
    encoder_hidden_size: int = field(default=1000, metadata={"help": "encoder LSTM cells"})
    encoder_layers: int = field(default=4, metadata={"help": "encoder LSTM layers"})
    decoder_embed_dim: int = field(default=1000, metadata={"help": "target embedding dim"})
    decoder_hidden_size: int = field(default=1000, metadata={"help": "decoder LSTM cells"})
    decoder_layers: int = field(default=4, metadata={"help": "decoder LSTM layers"})
    decoder_out_embed_dim: int = field(
        default=1000, metadata={"help": "dim of the attentional hidden state h~_t (eq. 5)"}
    )
    attention_score: ScoreChoice = field(
        default="general", metadata={"help": "score function, eq. (8) and location"}
    )
    attention_window: WindowChoice = field(
        default="local-p",
        metadata={"help": "attention window; 'none' is the paper's Base (no attention)"},
    )
    window_size: int = field(
        default=10, metadata={"help": "D: local windows cover [p_t - D, p_t + D]"}
    )
    renormalize_window: bool = field(
        default=False,
        metadata={
            "help": "local-p: renormalise after the Gaussian (Luong's code does not by "
            "default, normLocalAttn = 0)"
        },
    )
    position_logit_bound: float = field(
        default=0.0,
        metadata={
            "help": "local-p training aid: drop the gradient that would push the logit "
            "v_p·tanh(W_p h_t) of eq. (9) beyond ±B, so p_t cannot saturate at 0 or S "
            "early in training (0: off, the paper; the forward pass is unchanged)"
        },
    )
    position_lr_scale: float = field(
        default=1.0,
        metadata={
            "help": "local-p training aid: W_p and v_p of eq. (9) are this factor times "
            "parameters initialised that much wider, so the model and its initial values "
            "are unchanged and Adam moves the predicted position by this factor less "
            "per update (1: the paper)"
        },
    )
    position_sigma: float = field(
        default=0.0,
        metadata={
            "help": "local-p: sigma of eq. (10)'s Gaussian, in source positions "
            "(0: D/2, the paper); the window stays [p_t - D, p_t + D]"
        },
    )
    position_detach_query: bool = field(
        default=False,
        metadata={
            "help": "local-p training aid: eq. (9) reads h_t but passes no gradient back "
            "into the decoder; W_p and v_p learn as before (off: the paper)"
        },
    )
    position_scale: PositionScaleChoice = field(
        default="paper",
        metadata={
            "help": "local-p: S of eq. (9), p_t = S · sigmoid(.). paper: S = S_b, the "
            "positions attention weighs (by default the source words, which is also "
            "Luong's code's p_t); luong-code: S = S_b - 1, Luong's code's srcLens - 1 "
            "when S_b counts the final </s> as his srcLens does, so it needs "
            "--attend-source-eos (attnLayerForward.m line 106)"
        },
    )
    input_feeding: bool = field(
        default=True, metadata={"help": "feed h~_{t-1} to the next decoder input (§3.3)"}
    )
    reverse_source: bool = field(
        default=True, metadata={"help": "the encoder reads the source words right to left"}
    )
    reverse_source_eos: bool = field(
        default=False,
        metadata={
            "help": "with --reverse-source, reverse the source's final </s> with the words, "
            "so the encoder reads </s> w_n .. w_1; by default it reads w_n .. w_1 </s> "
            "(Sutskever et al.; Luong's code reverses the words only)"
        },
    )
    attend_source_eos: bool = field(
        default=False,
        metadata={
            "help": "attention may weigh the source's final </s>; by default attention, "
            "local-m's window and local-p's p_t cover the source words only, as in "
            "Luong's code, whose sources have no end symbol"
        },
    )
    dropout: float = field(
        default=0.2, metadata={"help": "dropout between stacked layers and before W_s"}
    )
    dropout_placement: DropoutPlacement = field(
        default="luong",
        metadata={
            "help": "besides the embeddings and between layers: zaremba: on h~_t before "
            "W_s, feeding h~_t itself; luong (Luong's code): on the fed h~_t at the LSTM's "
            "input, not before W_s; fairseq (fairseq's lstm): on h~_t, fed back dropped, "
            "and on the encoder's outputs"
        },
    )
    init_range: float = field(
        default=0.1, metadata={"help": "uniform init of all parameters in [-r, r]"}
    )
    forget_gate_bias: float = field(
        default=0.0,
        metadata={
            "help": "add this to the forget gates' biases of every LSTM layer after the "
            "uniform init, so that c_{t-1} is kept early in training (Gers et al. 2000; "
            "Jozefowicz et al. 2015 use 1); 0: the paper's init"
        },
    )
    share_decoder_input_output_embed: bool = field(
        default=False, metadata={"help": "tie the target embedding and W_s"}
    )
    precision: PrecisionChoice = precision_field()
    cuda_graphs: bool = field(
        default=False,
        metadata={
            "help": "training on a GPU: the input-feeding decoder's forward and backward "
            "pass recorded once per batch shape as CUDA graphs and replayed (batches padded "
            "up to --cuda-graph-step; modules/cuda_graphs.py, docs/SPEED.md); the model is "
            "the same, decoding and validation are not graphed"
        },
    )
    cuda_graph_step: int = field(
        default=8,
        metadata={
            "help": "--cuda-graphs: batch size, source and target length are padded up to "
            "multiples of this, one graph per padded shape"
        },
    )
    cuda_graph_limit: int = field(
        default=16,
        metadata={
            "help": "--cuda-graphs: at most this many padded shapes are graphed; batches "
            "of other shapes take the plain path"
        },
    )
    max_source_positions: int = field(
        default=1024,
        metadata={
            "help": "longest source; the location score has one weight row per position, "
            "the other scores read any length"
        },
    )
    max_target_positions: int = field(default=1024, metadata={"help": "longest target"})


# options of local-p's position network and prior: (set away from its default?, what it does)
LOCAL_P_ONLY = {
    "position_lr_scale": (lambda v: v != 1, "scales local-p's position network"),
    "position_detach_query": (bool, "changes local-p's position network"),
    "position_sigma": (lambda v: v > 0, "sets local-p's Gaussian"),
    "position_logit_bound": (lambda v: v > 0, "bounds local-p's predicted position"),
    "position_scale": (lambda v: v != "paper", "sets S of local-p's eq. (9)"),
}


def validate(cfg) -> None:
    compute_dtype(cfg.precision)  # an unknown --precision names the allowed values
    window = cfg.attention_window
    check_values(cfg, [f.name for f in fields(LuongConfig) if f.name in VALUE_RULES])
    lookup("--position-scale", POSITION_SCALES, cfg.position_scale)
    for name, (is_set, what) in LOCAL_P_ONLY.items():
        if is_set(getattr(cfg, name)) and window != "local-p":
            raise OptionError(
                f"{option_name(name)} {what}; it needs --attention-window local-p, got {window}"
            )
    if cfg.position_scale == "luong-code" and not cfg.attend_source_eos:
        raise OptionError(
            "--position-scale luong-code takes S = S_b - 1, Luong's srcLens - 1 where S_b "
            "counts the final </s>; it needs --attend-source-eos. Without it S_b is the "
            "number of source words, so the default --position-scale paper already gives "
            "Luong's code's p_t"
        )
    if cfg.encoder_layers != cfg.decoder_layers:
        raise OptionError(
            "the decoder starts from the encoder's final states, so --encoder-layers "
            f"({cfg.encoder_layers}) must equal --decoder-layers ({cfg.decoder_layers})"
        )
    if cfg.encoder_hidden_size != cfg.decoder_hidden_size:
        raise OptionError(
            "the decoder starts from the encoder's final states, so "
            f"--encoder-hidden-size ({cfg.encoder_hidden_size}) must equal "
            f"--decoder-hidden-size ({cfg.decoder_hidden_size})"
        )
    if window == "none":
        if cfg.input_feeding:
            raise OptionError(
                "--input-feeding feeds the attentional state h~_t, which does not exist "
                "with --attention-window none; add --no-input-feeding"
            )
        if cfg.decoder_out_embed_dim != cfg.decoder_hidden_size:
            raise OptionError(
                "with --attention-window none the output layer reads h_t, so "
                f"--decoder-out-embed-dim ({cfg.decoder_out_embed_dim}) must equal "
                f"--decoder-hidden-size ({cfg.decoder_hidden_size})"
            )
    if cfg.share_decoder_input_output_embed and (
        cfg.decoder_out_embed_dim != cfg.decoder_embed_dim
    ):
        raise OptionError(
            "--share-decoder-input-output-embed needs --decoder-out-embed-dim "
            f"({cfg.decoder_out_embed_dim}) == --decoder-embed-dim ({cfg.decoder_embed_dim})"
        )
