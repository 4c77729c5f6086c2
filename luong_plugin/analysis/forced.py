"""Forced decoding: a model's attention while it reads a given target.

The decoder is teacher-forced on the reference (prev_output_tokens = EOS +
reference, the layout fairseq trains with), so every target step attends with
the reference prefix as its history; this is how Luong et al. (2015, §5.4)
"force decode our attentional models to produce translations that match the
references" before extracting alignments. With the model's own beam output as
the reference, the maps equal what ``fairseq-generate --print-alignment soft``
prints (the decoders' full forward equals their incremental steps).

fairseq's own ``lstm`` is read too: its decoder returns the maps as its second
output (not a dict) and indexes them like *right*-padded source tokens (its
encoder converts fairseq's left padding before packing), so they are moved into
the layout of ``src_tokens`` before they are averaged or cut.

Input, shared by the tools that force-decode (``--path``, ``--data`` and one of):
    --source/--target FILE   text, one sentence per line: the model's tokens
                             (pieces), or raw text with --spm-model
    --gen-subset SPLIT       a binarized split of --data

Shape legend: B batch, T target len + EOS (padded), S source len + EOS (padded).
"""

import argparse
from dataclasses import dataclass
from typing import Iterator, List, NamedTuple, Optional, Sequence

import numpy as np
import torch

from .inputs import read_lines
from .words import SCHEMES, detect_scheme, word_index


@dataclass
class Pair:
    source: List[str]  # source pieces, no EOS
    target: List[str]  # target pieces, no EOS
    src_tokens: torch.Tensor  # S_b: ids, EOS last
    tgt_tokens: torch.Tensor  # T_b: ids, EOS last


@dataclass
class Forced:
    pair: Pair
    attention: np.ndarray  # (len(target) + 1) x (len(source) + 1), EOS last on both
    centers: Optional[np.ndarray]  # len(target) + 1: local-p's p_t, source-piece units


def add_forced_args(
    parser: argparse.ArgumentParser, required: bool = True, path_help=None, path_action="store"
):
    # fmt: off
    group = parser.add_argument_group("model and data (forced decoding)")
    group.add_argument("--path", required=required, action=path_action, help=path_help or
                       "checkpoint(s), colon-separated for an ensemble (attention averaged)")
    group.add_argument("--data", required=required,
                       help="fairseq data directory: the dictionaries, and --gen-subset")
    group.add_argument("--source", help="source sentences, one per line")
    group.add_argument("--target", help="target (reference) sentences, one per line")
    group.add_argument("--gen-subset", help="binarized split of --data to read instead, e.g. test")
    group.add_argument("--spm-model",
                       help="SentencePiece model: --source/--target are raw text to encode")
    group.add_argument("--subword", choices=SCHEMES, default="auto",
                       help="how pieces join into words (auto: '▁' -> sentencepiece, "
                       "'@@' -> bpe, else none)")
    group.add_argument("-s", "--source-lang", help="override the checkpoint's source language")
    group.add_argument("-t", "--target-lang", help="override the checkpoint's target language")
    group.add_argument("--batch-size", type=int, default=32)
    group.add_argument("--cpu", action="store_true", help="run on the CPU even if CUDA is there")
    # fmt: on
    return group


def load_ensemble(paths: str, data: str, source_lang=None, target_lang=None):
    from fairseq import checkpoint_utils

    import luong_plugin  # noqa: F401  (registers the models, allow-lists checkpoint globals)

    overrides = {"data": data}
    if source_lang:
        overrides["source_lang"] = source_lang
    if target_lang:
        overrides["target_lang"] = target_lang
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        paths.split(":"), arg_overrides=overrides
    )
    for model in models:
        model.eval()
    return models, task


def read_pairs(args, task, sources=None, targets=None) -> List[Pair]:
    """Sentence pairs from --source/--target text or --gen-subset; ``sources``
    and ``targets`` (lists of lines) replace --source and --target."""
    src_dict, tgt_dict = task.source_dictionary, task.target_dictionary
    if sources is not None or args.source:
        if sources is None:
            sources = read_lines(args.source, "--source")
        if targets is None:
            if not args.target:
                raise ValueError("--source needs --target (the reference to force-decode)")
            targets = read_lines(args.target, "--target")
        if len(sources) != len(targets):
            raise ValueError(
                f"{len(sources)} source sentences but {len(targets)} target sentences "
                "(--source and --target must have one line per sentence pair)"
            )
        if args.spm_model:
            import sentencepiece as spm

            processor = spm.SentencePieceProcessor(model_file=args.spm_model)
            sources = [" ".join(processor.encode(s, out_type=str)) for s in sources]
            targets = [" ".join(processor.encode(t, out_type=str)) for t in targets]
        return [
            Pair(
                s.split(),
                t.split(),
                src_dict.encode_line(s, add_if_not_exist=False, append_eos=True).long(),
                tgt_dict.encode_line(t, add_if_not_exist=False, append_eos=True).long(),
            )
            for s, t in zip(sources, targets)
        ]
    if not args.gen_subset:
        raise ValueError("give --source and --target (text) or --gen-subset (binarized data)")
    if args.spm_model:
        raise ValueError("--spm-model encodes --source/--target text; --gen-subset is binarized")
    task.load_dataset(args.gen_subset)
    dataset = task.dataset(args.gen_subset)
    if getattr(dataset, "tgt", None) is None:
        raise ValueError(f"--gen-subset {args.gen_subset}: no target side to force-decode")
    pairs = []
    for i in range(len(dataset)):
        src, tgt = dataset.src[i].long(), dataset.tgt[i].long()
        pairs.append(
            Pair([src_dict[k] for k in src[:-1]], [tgt_dict[k] for k in tgt[:-1]], src, tgt)
        )
    return pairs


def load_inputs(args, sources=None, targets=None):
    """-> (models, task, pairs, subword scheme) for the parsed ``add_forced_args``."""
    models, task = load_ensemble(args.path, args.data, args.source_lang, args.target_lang)
    pairs = read_pairs(args, task, sources, targets)
    return models, task, pairs, resolve_scheme(args.subword, pairs)


def resolve_scheme(scheme: str, pairs: Sequence[Pair]) -> str:
    if scheme != "auto":
        return scheme
    return detect_scheme(p.source + p.target for p in pairs)


class Batch(NamedTuple):
    src_tokens: torch.Tensor  # B x S, padded as the task pads sources
    src_lengths: torch.Tensor  # B
    prev_output_tokens: torch.Tensor  # B x T: EOS + reference
    target: torch.Tensor  # B x T: reference + EOS


def collate(task, batch: Sequence[Pair], device="cpu") -> Batch:
    """The pairs as the model reads them in training (fairseq's layout)."""
    from fairseq.data import data_utils

    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    left_pad = getattr(getattr(task, "cfg", None), "left_pad_source", True)
    targets = [p.tgt_tokens for p in batch]
    tensors = (
        data_utils.collate_tokens([p.src_tokens for p in batch], pad, eos, left_pad=left_pad),
        torch.tensor([len(p.src_tokens) for p in batch]),
        data_utils.collate_tokens(targets, pad, eos, move_eos_to_beginning=True),
        data_utils.collate_tokens(targets, pad, eos),
    )
    return Batch(*(t.to(device) for t in tensors))


@torch.no_grad()
def force_decode(models, task, pairs: Sequence[Pair], batch_size=32, cpu=False) -> Iterator[Forced]:
    """Teacher-forced attention of every pair, in order; an ensemble's maps are
    averaged (as fairseq's generator averages them)."""
    pad = task.source_dictionary.pad()
    device = "cuda" if torch.cuda.is_available() and not cpu else "cpu"
    models = [m.to(device) for m in models]
    for start in range(0, len(pairs), batch_size):
        batch = pairs[start : start + batch_size]
        src_tokens, src_lengths, prev_output_tokens, _ = collate(task, batch, device)
        attn, centers = None, None
        for model in models:
            a, p_t = model_attention(model, src_tokens, src_lengths, prev_output_tokens, pad)
            attn = a if attn is None else attn + a
            centers = p_t if len(models) == 1 else None  # B x T
        attn = (attn / len(models)).cpu()
        for b, pair in enumerate(batch):
            real = src_tokens[b].ne(pad).cpu()  # S: the sentence's columns, in order
            rows = len(pair.tgt_tokens)
            matrix = attn[b, :rows][:, real].numpy()  # (T_b) x (S_b)
            p_t = None if centers is None else centers[b, :rows].float().cpu().numpy()
            yield Forced(pair, matrix, p_t)


def model_attention(model, src_tokens, src_lengths, prev_output_tokens, pad):
    """-> (B x T x S maps in the layout of ``src_tokens``, B x T p_t or None)."""
    _, attn, p_t = forward_with_attention(model, src_tokens, src_lengths, prev_output_tokens, pad)
    if attn is None:
        raise ValueError(f"--path: {type(model).__name__} returns no attention")
    return attn, p_t


def forward_with_attention(model, src_tokens, src_lengths, prev_output_tokens, pad):
    """One forward pass -> (its logits, in the batch's order: B x T x V; the B x T x S maps
    in the layout of ``src_tokens``, or None where the model returns none; B x T p_t or
    None)."""
    if right_padded_maps(model):  # it packs its input: longest source first
        order = src_lengths.argsort(descending=True)  # B
        logits, attn = model(src_tokens[order], src_lengths[order], prev_output_tokens[order])
        back = order.argsort()
        if attn is None:
            return logits[back], None, None
        attn = attn[back].float()  # B x T x S, right-padded layout
        return logits[back], right_to_left_padded(attn, src_tokens.ne(pad)), None
    logits, extra = model(src_tokens, src_lengths, prev_output_tokens)
    attn = extra.get("attn", [None])[0]
    return logits, None if attn is None else attn.float(), extra.get("p_t", [None])[0]


def right_padded_maps(model) -> bool:
    """fairseq's ``lstm`` converts left-padded sources to right padding before
    packing and attends in that layout."""
    from fairseq.models.lstm import LSTMEncoder

    return isinstance(getattr(model, "encoder", None), LSTMEncoder) and model.encoder.left_pad


def right_to_left_padded(attn: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """B x T x S maps whose column s is the s-th real token (padding last) ->
    the left-padded layout of ``real`` (B x S, True on the sentence's tokens)."""
    S = real.size(1)
    n_pad = (~real).sum(dim=1, keepdim=True)  # B x 1
    columns = (torch.arange(S, device=attn.device).unsqueeze(0) - n_pad) % S  # B x S
    return attn.gather(2, columns.unsqueeze(1).expand_as(attn))  # B x T x S


def window_size(model) -> Optional[int]:
    """D of a local window ([p_t - D, p_t + D], in source pieces), else None."""
    window = getattr(getattr(getattr(model, "decoder", None), "attention", None), "window", None)
    return getattr(window, "window_size", None)


def word_indices(pair: Pair, scheme: str):
    return word_index(pair.source, scheme), word_index(pair.target, scheme)
