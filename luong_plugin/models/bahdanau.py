"""Bahdanau, Cho & Bengio (2015), "Neural Machine Translation by Jointly
Learning to Align and Translate" (arXiv:1409.0473), as the fairseq model
``bahdanau``: RNNsearch (Appendix A.2) and the RNNencdec baseline (Cho et al.
2014), selected with ``--attention {additive,none}``.

The defaults are the paper's RNNsearch: m = 620, n = 1000 per direction,
n' = 1000, l = 500 with maxout pool 2, no dropout, the initialisation of
Appendix B.1; every named architecture below sets only its differences.
"""

from dataclasses import dataclass, field

import torch.nn as nn
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import register_model

from ..modules.bahdanau_decoder import ATTENTIONS, READOUT_STATES, BahdanauDecoder
from ..modules.bigru_encoder import GRUEncoder
from ..modules.gru import PaperGRU
from ..modules.options import check_values, lookup
from ..modules.precision import compute_dtype, set_precision
from ..modules.scores import ConcatScore
from .base import PluginModel
from .config import (
    PrecisionChoice,
    precision_field,
    register_archs,
)

AttentionChoice = ChoiceEnum(list(ATTENTIONS))
ReadoutChoice = ChoiceEnum(list(READOUT_STATES))


@dataclass
class BahdanauConfig(FairseqDataclass):
    encoder_embed_dim: int = field(default=620, metadata={"help": "m: source embedding dim"})
    encoder_hidden_size: int = field(
        default=1000, metadata={"help": "n: encoder GRU units per direction"}
    )
    decoder_embed_dim: int = field(default=620, metadata={"help": "m: target embedding dim"})
    decoder_hidden_size: int = field(default=1000, metadata={"help": "n: decoder GRU units"})
    attention_dim: int = field(
        default=1000, metadata={"help": "n': hidden units of the alignment model"}
    )
    maxout_dim: int = field(
        default=500,
        metadata={"help": "l: maxout units of the deep output (after pooling)"},
    )
    maxout_pool: int = field(default=2, metadata={"help": "units pooled by each maxout unit"})
    readout_state: ReadoutChoice = field(
        default="previous",
        metadata={
            "help": "decoder state the deep output reads: 'previous' s_{i-1} "
            "(Appendix A.2.2) or 'current' s_i (eq. 4)"
        },
    )
    attention: AttentionChoice = field(
        default="additive",
        metadata={
            "help": "'additive' is RNNsearch; 'none' is RNNencdec (unidirectional "
            "encoder, fixed summary c)"
        },
    )
    dropout: float = field(
        default=0.0,
        metadata={"help": "dropout on the embeddings and on t_i (the paper uses none)"},
    )
    precision: PrecisionChoice = precision_field()
    max_source_positions: int = field(
        default=1024,
        metadata={"help": "longest source (the task's limit: the GRUs read any length)"},
    )
    max_target_positions: int = field(default=1024, metadata={"help": "longest target"})


def validate(cfg) -> None:
    compute_dtype(cfg.precision)  # an unknown --precision names the allowed values
    attention = lookup("--attention", ATTENTIONS, cfg.attention)
    lookup("--readout-state", READOUT_STATES, cfg.readout_state)
    sizes = [
        "encoder_embed_dim",
        "encoder_hidden_size",
        "decoder_embed_dim",
        "decoder_hidden_size",
        "maxout_dim",
        "maxout_pool",
        "max_source_positions",
        "max_target_positions",
    ]
    if attention is not None:
        sizes.append("attention_dim")  # unused by RNNencdec
    check_values(cfg, sizes + ["dropout"])


def describe_state_dict(state: dict) -> dict:
    """The options a `bahdanau` state dict implies, read from its keys and shapes
    (for errors about checkpoints that do not fit the model)."""

    def size(key, dim):
        return tuple(state[key].shape)[dim] if key in state else None

    maxout_dim, readout = size("decoder.W_o.weight", 1), size("decoder.U_o.weight", 0)
    return {
        "--attention": "additive" if "decoder.attention.v_a.weight" in state else "none",
        "source dictionary size": size("encoder.embed_tokens.weight", 0),
        "--encoder-embed-dim": size("encoder.embed_tokens.weight", 1),
        "--encoder-hidden-size": size("encoder.forward_gru.U.weight", 1),
        "--attention-dim": size("decoder.attention.W_q.weight", 0),
        "target dictionary size": size("decoder.embed_tokens.weight", 0),
        "--decoder-embed-dim": size("decoder.embed_tokens.weight", 1),
        "--decoder-hidden-size": size("decoder.gru.U.weight", 1),
        "--maxout-dim": maxout_dim,
        "--maxout-pool": readout // maxout_dim if readout and maxout_dim else None,
    }


@register_model("bahdanau", dataclass=BahdanauConfig)
class BahdanauModel(PluginModel):
    CONFIG, FAMILY, FAMILY_KEY = BahdanauConfig, "bahdanau", "encoder.forward_gru.W.weight"

    describe_state_dict = staticmethod(describe_state_dict)
    validate = staticmethod(validate)

    @classmethod
    def build_model(cls, cfg, task):
        cfg = cls.read_options(cfg)
        attention_cls = lookup("--attention", ATTENTIONS, cfg.attention)
        encoder = GRUEncoder(
            task.source_dictionary,
            embed_dim=cfg.encoder_embed_dim,
            hidden_size=cfg.encoder_hidden_size,
            bidirectional=attention_cls is not None,
            dropout=cfg.dropout,
        )  # the GRUs read any length: no limit of the encoder's own
        attention = None
        if attention_cls is not None:
            attention = attention_cls(
                cfg.decoder_hidden_size,
                encoder.output_dim,
                attention_dim=cfg.attention_dim,
                key_bias=True,  # b_a
            )
        decoder = BahdanauDecoder(
            task.target_dictionary,
            embed_dim=cfg.decoder_embed_dim,
            hidden_size=cfg.decoder_hidden_size,
            # RNNsearch reads the annotations h_j, RNNencdec the summary c (n)
            context_dim=encoder.output_dim,
            init_source_dim=cfg.encoder_hidden_size,  # h←_1 or c
            attention=attention,
            maxout_dim=cfg.maxout_dim,
            maxout_pool=cfg.maxout_pool,
            readout_state=cfg.readout_state,
            dropout=cfg.dropout,
            max_target_positions=cfg.max_target_positions,
        )
        model = cls(encoder, decoder)
        set_precision(model, cfg.precision)
        init_bahdanau_(model)
        return model


def init_bahdanau_(model: nn.Module) -> None:
    """Appendix B.1: recurrent U, U_z, U_r (every direction and the decoder)
    random orthogonal, each n x n block separately; W_a, U_a ~ N(0, 0.001²);
    v_a and all biases zero; every other weight matrix, embeddings included,
    ~ N(0, 0.01²). Padding embeddings are zero (they never enter a state)."""
    for name, param in model.named_parameters():
        if name.endswith("bias"):  # b_a is the attention's W_k.bias
            nn.init.zeros_(param)
        else:
            nn.init.normal_(param, mean=0.0, std=0.01)
    for module in model.modules():
        if isinstance(module, PaperGRU):
            for block in module.recurrent_blocks():
                nn.init.orthogonal_(block)
        elif isinstance(module, ConcatScore):
            nn.init.normal_(module.W_q.weight, mean=0.0, std=0.001)  # W_a
            nn.init.normal_(module.W_k.weight, mean=0.0, std=0.001)  # U_a
            nn.init.zeros_(module.v_a.weight)
        elif isinstance(module, nn.Embedding):
            module.weight.data[module.padding_idx].zero_()


# -- named architectures: each sets only its differences from BahdanauConfig -----
WMT_EN_FR = {}  # §4.2 / Appendix A.2: the defaults are the paper's sizes

ARCHS = {
    "bahdanau_rnnsearch_wmt_en_fr": dict(WMT_EN_FR),
    # Cho et al. (2014) predict y_t from h<t> = f(h<t-1>, y_{t-1}, c): the new state
    "bahdanau_rnnencdec_wmt_en_fr": dict(WMT_EN_FR, attention="none", readout_state="current"),
    # tiny, for tests: every option still selectable
    "bahdanau_tiny": dict(
        encoder_embed_dim=16,
        encoder_hidden_size=24,
        decoder_embed_dim=16,
        decoder_hidden_size=24,
        attention_dim=20,
        maxout_dim=12,
    ),
}

arch_config = register_archs("bahdanau", BahdanauConfig, ARCHS)
