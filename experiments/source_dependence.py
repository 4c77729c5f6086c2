"""Does a translation model read its source? Three measurements on a checkpoint.

    python -m experiments.source_dependence --path ckpt.pt \
        --data data/bible_es_en/bin [--sentences 200] [--bleu-sentences 200]

1. Source swap (teacher forcing, valid set): log p(reference | its own source)
   against log p(reference | the next sentence's source), per target token.
2. The summary c of RNNencdec (``encoder_out["summary"]``): mean |c| and how much
   it varies between sentences (saturated and constant = the source is lost).
3. BLEU (test set, beam 5, detokenised, sacreBLEU against the raw reference) of
   the model given each sentence's source, and of the same model given the
   empty source (``</s>`` alone) for every sentence.
"""

import argparse
import os

import sacrebleu
import torch
from fairseq import checkpoint_utils
from fairseq.data import data_utils
from fairseq.sequence_generator import SequenceGenerator

import luong_plugin  # noqa: F401  (registers the models)


def load(path, data):
    models, _cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [path], arg_overrides={"data": data}
    )
    model = models[0].eval()
    return model, task


def batches(dataset, indices, size=32):
    for start in range(0, len(indices), size):
        samples = [dataset[i] for i in indices[start : start + size]]
        yield dataset.collater(samples)


def empty_sources(src_tokens, eos, pad):
    """Every row the one-token source </s> (left-padded, as fairseq batches)."""
    empty = torch.full_like(src_tokens[:, -1:], eos)  # B x 1
    return empty, torch.ones(src_tokens.size(0), dtype=torch.long)


@torch.no_grad()
def target_logprob(model, src_tokens, src_lengths, net_input, target, pad):
    logits, _ = model(src_tokens, src_lengths, net_input["prev_output_tokens"])
    lprobs = torch.log_softmax(logits.float(), dim=-1)  # B x T x V
    tok = lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)  # B x T
    return tok.masked_fill(target.eq(pad), 0.0).sum(1)  # B


@torch.no_grad()
def source_swap(model, task, n):
    dataset = task.dataset("valid")
    pad, eos = task.source_dictionary.pad(), task.source_dictionary.eos()
    own_total, swapped_total, empty_total, tokens, wins, sentences = 0.0, 0.0, 0.0, 0, 0, 0
    summaries = []
    for sample in batches(dataset, list(range(min(n, len(dataset))))):
        net, target = sample["net_input"], sample["target"]
        src, lengths = net["src_tokens"], net["src_lengths"]
        own = target_logprob(model, src, lengths, net, target, pad)
        order = torch.roll(torch.arange(src.size(0)), 1)
        swapped = target_logprob(model, src[order], lengths[order], net, target, pad)
        empty = target_logprob(model, *empty_sources(src, eos, pad), net, target, pad)
        own_total += own.sum().item()
        swapped_total += swapped.sum().item()
        empty_total += empty.sum().item()
        tokens += target.ne(pad).sum().item()
        wins += (own > swapped).sum().item()
        sentences += src.size(0)
        encoder_out = model.encoder(src, lengths)
        if "summary" in encoder_out:
            summaries.append(encoder_out["summary"])
    report = {
        "valid sentences": sentences,
        "log p per token, own source": own_total / tokens,
        "log p per token, another sentence's source": swapped_total / tokens,
        "log p per token, empty source": empty_total / tokens,
        "sentences whose own source scores higher": wins / sentences,
    }
    if summaries:
        c = torch.cat(summaries)  # N x n
        report["summary: mean |c|"] = c.abs().mean().item()
        report["summary: mean over units of the std across sentences"] = c.std(0).mean().item()
        report["summary: largest |c_a - c_b| between two sentences"] = (
            (c.max(0).values - c.min(0).values).max().item()
        )
    return report


@torch.no_grad()
def bleu(model, task, n, references, empty):
    dataset = task.dataset("test")
    tgt_dict = task.target_dictionary
    generator = SequenceGenerator([model], tgt_dict, beam_size=5, max_len_b=200)
    hyps = {}
    for sample in batches(dataset, list(range(min(n, len(dataset))))):
        net = dict(sample["net_input"])
        if empty:
            net["src_tokens"], net["src_lengths"] = empty_sources(
                net["src_tokens"], tgt_dict.eos(), tgt_dict.pad()
            )
        out = generator.generate([model], {"net_input": net})
        for i, sentence_id in enumerate(sample["id"].tolist()):
            pieces = tgt_dict.string(out[i][0]["tokens"])
            hyps[sentence_id] = data_utils.post_process(pieces, "sentencepiece")
    ids = sorted(hyps)
    score = sacrebleu.corpus_bleu([hyps[i] for i in ids], [[references[i] for i in ids]])
    distinct = len(set(hyps.values()))
    return score.score, distinct, len(ids)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--data", required=True, help="the binarized data (bin/)")
    parser.add_argument("--raw", help="raw/ with test.en (default: DATA/../raw)")
    parser.add_argument("--sentences", type=int, default=200, help="valid sentences, source swap")
    parser.add_argument("--bleu-sentences", type=int, default=200, help="test sentences, BLEU")
    a = parser.parse_args(argv)
    torch.set_num_threads(1)
    model, task = load(a.path, a.data)
    for split in ("valid", "test"):
        task.load_dataset(split)
    for key, value in source_swap(model, task, a.sentences).items():
        print(f"{key}: {value:.4f}" if isinstance(value, float) else f"{key}: {value}")
    raw = a.raw or os.path.join(os.path.dirname(os.path.abspath(a.data)), "raw")
    with open(os.path.join(raw, f"test.{task.cfg.target_lang}")) as f:
        references = [line.rstrip("\n") for line in f]
    for label, empty in (("own source", False), ("empty source", True)):
        score, distinct, n = bleu(model, task, a.bleu_sentences, references, empty)
        print(f"BLEU, {label}: {score:.2f} ({distinct} distinct hypotheses of {n})")


if __name__ == "__main__":
    main()
