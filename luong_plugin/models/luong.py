"""Luong, Pham & Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation" (arXiv:1508.04025), as the fairseq model ``luong``.

The defaults are the paper's best single system (local-p, general score,
D = 10, input feeding, reversed source, 4 x 1000 LSTMs, dropout 0.2, uniform
init in [-0.1, 0.1]); every named architecture below sets only its differences.
"""

import re
from dataclasses import dataclass, field, fields

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import register_model

from ..modules.attention import LuongAttention
from ..modules.lstm_encoder import LuongEncoder
from ..modules.luong_decoder import LuongDecoder
from ..modules.options import VALUE_RULES, OptionError, check_values, lookup, option_name
from ..modules.precision import compute_dtype, set_precision
from ..modules.scores import SCORES
from ..modules.windows import POSITION_SCALES, WINDOWS
from .base import PluginModel
from .config import (
    PrecisionChoice,
    precision_field,
    register_archs,
)

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


def describe_state_dict(state: dict) -> dict:
    """The options a `luong` state dict implies, read from its keys and shapes
    (for errors about checkpoints that do not fit the model)."""

    def size(key, dim):
        return tuple(state[key].shape)[dim] if key in state else None

    def layers(module):
        return sum(bool(re.fullmatch(rf"{module}\.lstm\.weight_ih_l\d+", k)) for k in state)

    options = {
        "source dictionary size": size("encoder.embed_tokens.weight", 0),
        "--encoder-embed-dim": size("encoder.embed_tokens.weight", 1),
        "--encoder-hidden-size": size("encoder.lstm.weight_hh_l0", 1),
        "--encoder-layers": layers("encoder"),
        "target dictionary size": size("decoder.embed_tokens.weight", 0),
        "--decoder-embed-dim": size("decoder.embed_tokens.weight", 1),
        "--decoder-hidden-size": size("decoder.lstm.weight_hh_l0", 1),
        "--decoder-layers": layers("decoder"),
        "--decoder-out-embed-dim": size("decoder.W_s.weight", 1),
    }
    embed, lstm_in = options["--decoder-embed-dim"], size("decoder.lstm.weight_ih_l0", 1)
    if embed is not None and lstm_in is not None:
        options["--input-feeding"] = "on" if lstm_in > embed else "off"
    if "decoder.W_c.weight" not in state:
        options["--attention-window"] = "none"
        return options
    # global and local-m have no parameters of their own: a checkpoint cannot tell them apart
    has_w_p = "decoder.attention.window.W_p.weight" in state
    options["--attention-window"] = "local-p" if has_w_p else "global or local-m"
    score = "dot"
    if "decoder.attention.score.W_q.weight" in state:
        score = "concat"
    elif "decoder.attention.score.W_a.weight" in state:
        rows = size("decoder.attention.score.W_a.weight", 0)
        hidden = (options["--decoder-hidden-size"], options["--encoder-hidden-size"])
        if tuple(state["decoder.attention.score.W_a.weight"].shape) == hidden:
            score = "general"
        else:
            score = f"location (--max-source-positions {rows})"
    options["--attention-score"] = score
    return options


@register_model("luong", dataclass=LuongConfig)
class LuongModel(PluginModel):
    CONFIG, FAMILY, FAMILY_KEY = LuongConfig, "luong", "encoder.lstm.weight_ih_l0"

    describe_state_dict = staticmethod(describe_state_dict)
    validate = staticmethod(validate)

    @classmethod
    def build_model(cls, cfg, task):
        cfg = cls.read_options(cfg)
        window, score, placement = cfg.attention_window, cfg.attention_score, cfg.dropout_placement
        encoder = LuongEncoder(
            task.source_dictionary,
            embed_dim=cfg.encoder_embed_dim,
            hidden_size=cfg.encoder_hidden_size,
            num_layers=cfg.encoder_layers,
            dropout=cfg.dropout,
            reverse_source=cfg.reverse_source,
            reverse_source_eos=cfg.reverse_source_eos,
            attend_source_eos=cfg.attend_source_eos,
            output_dropout=cfg.dropout if placement == "fairseq" else 0.0,
            # the LSTMs read any length; the location score has one row per position
            max_source_positions=(
                cfg.max_source_positions if score == "location" and window != "none" else None
            ),
        )
        attention = None
        if window != "none":
            attention = LuongAttention(
                cfg.attention_score,
                window,
                query_dim=cfg.decoder_hidden_size,
                key_dim=cfg.encoder_hidden_size,
                window_size=cfg.window_size,
                renormalize=cfg.renormalize_window,
                max_source_positions=cfg.max_source_positions,
                logit_bound=cfg.position_logit_bound,
                position_lr_scale=cfg.position_lr_scale,
                position_sigma=cfg.position_sigma,
                position_detach_query=cfg.position_detach_query,
                position_scale=cfg.position_scale,
            )
        decoder = LuongDecoder(
            task.target_dictionary,
            embed_dim=cfg.decoder_embed_dim,
            hidden_size=cfg.decoder_hidden_size,
            out_embed_dim=cfg.decoder_out_embed_dim,
            num_layers=cfg.decoder_layers,
            dropout=cfg.dropout,
            attention=attention,
            input_feeding=cfg.input_feeding,
            encoder_output_dim=cfg.encoder_hidden_size,
            max_target_positions=cfg.max_target_positions,
            share_input_output_embed=cfg.share_decoder_input_output_embed,
            dropout_placement=placement,
        )
        model = cls(encoder, decoder)
        set_precision(model, cfg.precision)
        init_uniform_(model, cfg.init_range)
        add_forget_gate_bias_(model, cfg.forget_gate_bias)
        if attention is not None and cfg.position_lr_scale != 1:
            window_module = attention.window
            for param in (window_module.W_p.weight, window_module.v_p.weight):
                param.data.div_(cfg.position_lr_scale)  # a · param: the ±r init
        return model

    def before_load(self, model_cfg) -> None:
        if not _has_option(model_cfg, "attend_source_eos"):
            self.keep_earlier_conventions()

    def keep_earlier_conventions(self) -> None:
        """A checkpoint saved before --attend-source-eos existed: decode it as it was
        trained, with </s> read first when reversed and attended, and local-p's
        window centred on floor(p_t + 0.5)."""
        self.encoder.reverse_source_eos = True
        self.encoder.attend_source_eos = True
        self.decoder.dropout_placement = "zaremba"
        if self.decoder.attention is not None:
            self.decoder.attention.window.round_centre = True


def _has_option(cfg, name: str) -> bool:
    """Whether a checkpoint's model config (a DictConfig or a Namespace) sets ``name``."""
    try:
        return name in cfg
    except TypeError:  # argparse.Namespace
        return hasattr(cfg, name)


def init_uniform_(model: nn.Module, init_range: float) -> None:
    """§4.1: all parameters uniform in [-init_range, init_range]; padding rows zero."""
    for param in model.parameters():
        nn.init.uniform_(param, -init_range, init_range)
    for embedding in (model.encoder.embed_tokens, model.decoder.embed_tokens):
        embedding.weight.data[embedding.padding_idx].zero_()


def add_forget_gate_bias_(model: nn.Module, bias: float) -> None:
    """Add ``bias`` to the forget gate's input bias b_ih[H:2H] (torch's gate order i, f, g,
    o) of every layer of the encoder's and the decoder's LSTM."""
    if bias == 0:
        return
    for lstm in (model.encoder.lstm, model.decoder.lstm):
        H = lstm.hidden_size
        for k in range(lstm.num_layers):
            getattr(lstm, f"bias_ih_l{k}").data[H : 2 * H] += bias


# -- named architectures: each sets only its differences from LuongConfig --------
WMT = {}  # the paper's WMT'14 En-De systems use the defaults' sizes
BASE = dict(WMT, attention_window="none", input_feeding=False, reverse_source=False)
ATTENTIONAL = dict(WMT)  # reverse + dropout + input feeding (Table 4)

# The settings `make demo` trains with, one name for a user's own data (recipes/own_text):
# the paper's best system (local-p, general, input feeding, dropout) at 1 x 256 with the
# departures docs/DEMO.md lists with their evidence: the source read forward,
# local-p's window renormalised with its logit bounded, D = 14 pieces with sigma 5, a
# forget-gate bias of 1, shared target embeddings. Optimisation and precision are the
# trainer's: configs/luong_recommended.yaml has the demo's, `default_precision` the
# precision. The paper's archs above are left as they are.
RECOMMENDED = dict(
    encoder_embed_dim=256,
    encoder_hidden_size=256,
    encoder_layers=1,
    decoder_embed_dim=256,
    decoder_hidden_size=256,
    decoder_layers=1,
    decoder_out_embed_dim=256,
    attention_window="local-p",
    attention_score="general",
    window_size=14,
    renormalize_window=True,
    position_logit_bound=4.0,
    position_sigma=5.0,
    reverse_source=False,
    forget_gate_bias=1.0,
    share_decoder_input_output_embed=True,
    dropout=0.2,
)
RECOMMENDED_GLOBAL = dict(
    RECOMMENDED,
    attention_window="global",
    renormalize_window=False,
    position_logit_bound=0.0,
    position_sigma=0.0,
)
# local-m with the demo's window, otherwise the demo: at 7 minutes (docs/CORPUS_BUDGET.md)
# ahead of local-p and global attention on Debian's manuals, between them on the Bible
RECOMMENDED_LOCAL_M = dict(RECOMMENDED_GLOBAL, attention_window="local-m", window_size=14)

ARCHS = {
    "luong_wmt_en_de": ATTENTIONAL,
    # Table 1, one row each (rows 7-8 are decoding options: --replace-unk, ensembles)
    "luong_base_wmt_en_de": dict(BASE, dropout=0.0),
    "luong_base_reverse_wmt_en_de": dict(BASE, dropout=0.0, reverse_source=True),
    "luong_base_reverse_dropout_wmt_en_de": dict(BASE, reverse_source=True),
    "luong_global_location_no_feed_wmt_en_de": dict(
        ATTENTIONAL, attention_window="global", attention_score="location", input_feeding=False
    ),
    # Table 4 (and Table 1 rows 5-6)
    "luong_global_location_wmt_en_de": dict(
        ATTENTIONAL, attention_window="global", attention_score="location"
    ),
    "luong_global_dot_wmt_en_de": dict(
        ATTENTIONAL, attention_window="global", attention_score="dot"
    ),
    "luong_global_general_wmt_en_de": dict(
        ATTENTIONAL, attention_window="global", attention_score="general"
    ),
    "luong_global_concat_wmt_en_de": dict(
        ATTENTIONAL, attention_window="global", attention_score="concat"
    ),
    "luong_local_m_dot_wmt_en_de": dict(
        ATTENTIONAL, attention_window="local-m", attention_score="dot"
    ),
    "luong_local_m_general_wmt_en_de": dict(
        ATTENTIONAL, attention_window="local-m", attention_score="general"
    ),
    "luong_local_p_dot_wmt_en_de": dict(
        ATTENTIONAL, attention_window="local-p", attention_score="dot"
    ),
    "luong_local_p_general_wmt_en_de": dict(ATTENTIONAL),
    # not a paper row: make demo's model, local-p, global or local-m (recipes/own_text)
    "luong_recommended": RECOMMENDED,
    "luong_recommended_global": RECOMMENDED_GLOBAL,
    "luong_recommended_local_m": RECOMMENDED_LOCAL_M,
    # tiny, for tests: every option still selectable
    "luong_tiny": dict(
        encoder_embed_dim=16,
        encoder_hidden_size=24,
        encoder_layers=2,
        decoder_embed_dim=16,
        decoder_hidden_size=24,
        decoder_layers=2,
        decoder_out_embed_dim=20,
        window_size=3,
        dropout=0.1,
    ),
}

arch_config = register_archs("luong", LuongConfig, ARCHS)
