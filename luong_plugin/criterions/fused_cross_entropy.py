"""fairseq's label-smoothed cross-entropy with the output layer fused in.

``--criterion fused_label_smoothed_cross_entropy`` gives the loss, the logged
figures and the gradients of ``--criterion label_smoothed_cross_entropy``
(tested equal), computed another way:

- only the target tokens that are not padding go through the output layer
  (fairseq projects every position of the padded B x T batch, then zeroes the
  padding's loss);
- the output layer, the softmax and the loss run over chunks of
  ``--loss-chunk-tokens`` tokens, and each chunk's gradients are formed at
  once, in the forward pass: no N x V logits, log-probabilities or gradient
  of them is ever held, only a chunk's.

For one token with features x (Luong's h̃_t, eq. (6); Bahdanau's t_i), target
y and a vocabulary of V:

    z = W x + b,   lse = log Σ_v exp z_v,   p = softmax(z)
    nll    = lse - z_y
    smooth = Σ_v (lse - z_v)
    loss   = a · nll + c · smooth,   c = ε / (V - 1),  a = 1 - ε - c   (fairseq's)
    ∂loss/∂z = (a + cV) p - a · onehot(y) - c

so ∂loss/∂x = (a + cV) pᵀW - a W_y - c Σ_v W_v, and likewise for W and b: the
products with p are the only N x V work, and the one-hot and constant terms
are added once, as rows. Between the products each chunk takes one pass of exp
over its n x V logits (the softmax, in fp32): lse is read off it as
max_v z_v - log max_v p_v (max p = 1 / Σ_v exp(z_v - max z) ≥ 1 / V, so its log
loses nothing), and smooth = V · lse - Σ_v z_v; no log-probabilities are formed.

It needs a decoder whose output layer is one linear map of its features:
``luong``, ``bahdanau`` and fairseq's own ``lstm`` (without adaptive softmax).

Shape legend: B batch, T target len, N real (non-padding) target tokens, C
feature dim, V vocab.
"""

import inspect
from dataclasses import dataclass, field
from typing import Optional, Tuple

import torch
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)
from fairseq.models.lstm import LSTMDecoder
from torch import Tensor

from ..modules.options import OptionError, require_positive

NAME = "fused_label_smoothed_cross_entropy"


@dataclass
class FusedLabelSmoothedCrossEntropyConfig(LabelSmoothedCrossEntropyCriterionConfig):
    loss_chunk_tokens: int = field(
        default=1024,
        metadata={"help": "target tokens per chunk of the fused output layer and loss"},
    )


def output_projection(decoder) -> Tuple[Tensor, Optional[Tensor]]:
    """(weight V x C, bias V or None) of the decoder's output layer: the plugin's
    decoders name it (``output_projection()``); fairseq's lstm is read here."""
    if inspect.ismethod(getattr(decoder, "output_projection", None)):  # not a transformer's Linear
        layer = decoder.output_projection()
        return layer.weight, layer.bias
    if isinstance(decoder, LSTMDecoder) and decoder.adaptive_softmax is None:
        if decoder.share_input_output_embed:
            return decoder.embed_tokens.weight, None
        return decoder.fc_out.weight, decoder.fc_out.bias
    raise OptionError(
        f"--criterion {NAME} needs a decoder whose output layer is one linear map "
        f"(luong, bahdanau, or fairseq's lstm without adaptive softmax); "
        f"{type(decoder).__name__} is not one: use --criterion label_smoothed_cross_entropy"
    )


class _FusedOutputLoss(torch.autograd.Function):
    """(loss, nll, n_correct) of N tokens; the gradients of loss are formed in
    forward, chunk by chunk, and only scaled in backward."""

    @staticmethod
    def forward(ctx, features, weight, bias, target, epsilon, chunk, count, recording):
        N, V = features.size(0), weight.size(0)
        c = epsilon / (V - 1)
        a = 1.0 - epsilon - c
        acc = torch.promote_types(features.dtype, torch.float32)  # as fairseq's log-softmax
        # the products in the features' dtype (bf16 from a --precision bf16 model), the
        # sums in acc; the weight is cast once per call, not per chunk
        low = features.dtype != acc
        weight_low = weight.to(features.dtype)  # V x C
        bias_low = None if bias is None else bias.to(features.dtype)  # V
        inputs = (features, weight, bias)
        # under no_grad (validation) needs_input_grad still says True: ``recording`` decides
        grads = [torch.zeros_like(t, dtype=acc) if need and recording else None
                 for t, need in zip(inputs, ctx.needs_input_grad)]  # fmt: skip
        d_features, d_weight, d_bias = grads  # N x C, V x C, V
        weight_acc = weight.to(acc)  # V x C
        nll = features.new_zeros((), dtype=acc)
        smooth = features.new_zeros((), dtype=acc)
        correct = target.new_zeros(())
        for start in range(0, N, chunk):
            x, y = features[start : start + chunk], target[start : start + chunk]  # n x C, n
            if bias is None:
                z = x.matmul(weight_low.t())  # n x V, in the model's dtype like fairseq's logits
            else:
                z = torch.addmm(bias_low, x, weight_low.t())  # n x V
            z = z.to(acc)  # n x V (fp32 logits stay as they are)
            p = torch.softmax(z, dim=-1)  # n x V: the chunk's one pass of exp
            # lse = max z - log max p: max p = 1 / Σ_v exp(z_v - max z) ≥ 1 / V
            lse = z.amax(-1) - p.amax(-1).log()  # n
            nll += (lse - z.gather(1, y.unsqueeze(1)).squeeze(1)).sum()
            smooth += V * lse.sum() - z.sum()
            if count:
                correct += (z.argmax(-1) == y).sum()
            if all(g is None for g in grads):
                continue
            if low:
                p = p.to(features.dtype)  # n x V: the products' dtype
                if d_features is not None:
                    d_features[start : start + chunk] = p.mm(weight_low)  # n x C
                if d_weight is not None:
                    d_weight += p.t().mm(x)  # V x C
            else:
                if d_features is not None:
                    torch.mm(p, weight_acc, out=d_features[start : start + chunk])  # n x C
                if d_weight is not None:
                    d_weight.addmm_(p.t(), x.to(acc))  # V x C
            if d_bias is not None:
                d_bias += p.sum(0, dtype=acc)  # V
        # (a + cV) p - a onehot(y) - c: the one-hot and constant terms, as rows
        k = a + c * V
        if d_features is not None:
            d_features.mul_(k).sub_(weight_acc.sum(0), alpha=c)
            d_features.sub_(weight_acc[target], alpha=a)
        if d_weight is not None:
            features_acc = features.to(acc)  # N x C
            d_weight.mul_(k).sub_(features_acc.sum(0), alpha=c)
            d_weight.index_add_(0, target, features_acc, alpha=-a)
        if d_bias is not None:
            d_bias.mul_(k).sub_(c * N)
            d_bias.index_add_(0, target, torch.ones_like(target, dtype=acc), alpha=-a)
        ctx.grads = [None if g is None else (g, t.dtype) for g, t in zip(grads, inputs)]
        ctx.mark_non_differentiable(nll, correct)
        return a * nll + c * smooth, nll, correct

    @staticmethod
    def backward(ctx, d_loss, d_nll, d_correct):
        grads = [None if g is None else (g[0] * d_loss).to(g[1]) for g in ctx.grads]
        del ctx.grads
        return (*grads, None, None, None, None, None)


def fused_output_loss(features, weight, bias, target, epsilon: float, chunk: int, count=False):
    """(loss, nll, n_correct), summed over the N rows of ``features`` (N x C)
    and ``target`` (N): the label-smoothed loss of softmax(W x + b); n_correct
    (argmax = target) is counted only when ``count``."""
    recording = torch.is_grad_enabled()
    return _FusedOutputLoss.apply(features, weight, bias, target, epsilon, chunk, count, recording)


@register_criterion(NAME, dataclass=FusedLabelSmoothedCrossEntropyConfig)
class FusedLabelSmoothedCrossEntropyCriterion(LabelSmoothedCrossEntropyCriterion):
    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        loss_chunk_tokens=1024,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        require_positive("--loss-chunk-tokens", loss_chunk_tokens)
        self.chunk = loss_chunk_tokens

    def forward(self, model, sample, reduce=True):
        if not reduce:
            raise OptionError(f"--criterion {NAME} sums over tokens; it has no per-token losses")
        projection = output_projection(model.decoder)  # before the forward pass: fail early
        features, _ = model.extract_features(**sample["net_input"])  # B x T x C
        loss, nll, correct, total = self.loss_of_features(model, features, sample, projection)
        sample_size = sample["target"].size(0) if self.sentence_avg else sample["ntokens"]
        logging_output = {
            "loss": loss.data,
            "nll_loss": nll.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample["target"].size(0),
            "sample_size": sample_size,
        }
        if self.report_accuracy:
            logging_output["n_correct"] = int(correct)
            logging_output["total"] = total
        return loss, sample_size, logging_output

    def loss_of_features(self, model, features: Tensor, sample, projection=None):
        """(loss, nll, n_correct, N) of the decoder's features (B x T x C)."""
        weight, bias = projection or output_projection(model.decoder)
        target = model.get_targets(sample, (features, None))  # B x T
        if self.ignore_prefix_size > 0:
            features = features[:, self.ignore_prefix_size :]
            target = target[:, self.ignore_prefix_size :]
        real = target.ne(self.padding_idx).reshape(-1)  # B·T
        features = features.reshape(-1, features.size(-1))[real]  # N x C
        target = target.reshape(-1)[real]  # N
        loss, nll, correct = fused_output_loss(
            features, weight, bias, target, self.eps, self.chunk, self.report_accuracy
        )
        return loss, nll, correct, target.numel()
