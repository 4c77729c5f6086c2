"""SentencePiece from the command line, through the Python package.

The PyPI ``sentencepiece`` wheel ships no ``spm_train``/``spm_encode`` binaries, so
the recipes call this module instead::

    python -m luong_plugin.corpora.spm train --input train.es train.en \\
        --model-prefix spm/joint --vocab-size 8000
    python -m luong_plugin.corpora.spm encode --model spm/joint.model \\
        --input valid.es --output spm/valid.es
    python -m luong_plugin.corpora.spm decode --model spm/joint.model \\
        --input hyp.spm --output hyp.txt
    python -m luong_plugin.corpora.spm fairseq-dict --model spm/joint.model \\
        --output spm/dict.txt

Training defaults (unigram, ``character_coverage=1.0``, identity normalisation) are
chosen for the Bible recipe: every character of the training text is a piece, so
text made of those characters never encodes to ``<unk>``, and the extractor has
already normalised the text, so ``decode(encode(x)) == x``.
"""

import argparse
import os
import sys


def train(inputs, model_prefix, vocab_size, model_type="unigram"):
    import sentencepiece as spm

    os.makedirs(os.path.dirname(model_prefix) or ".", exist_ok=True)
    spm.SentencePieceTrainer.train(
        input=",".join(inputs),
        model_prefix=model_prefix,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        normalization_rule_name="identity",
        # a soft limit: tiny test corpora may not support the requested size
        hard_vocab_limit=False,
        num_threads=min(8, os.cpu_count() or 1),
        minloglevel=2,
        # fairseq adds its own <s>, <pad>, </s>, <unk>: keep spm's ids out of the way
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
        pad_id=-1,
    )


def encode(model, input_path, output_path):
    """Encode ``input_path`` line by line into space-separated pieces; returns
    ``(lines, unknown pieces)``."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model)
    with open(input_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    ids = processor.encode(lines)
    unknown = sum(piece_id == processor.unk_id() for row in ids for piece_id in row)
    with open(output_path, "w", encoding="utf-8") as f:
        for row in ids:
            f.write(" ".join(processor.id_to_piece(row)) + "\n")
    return len(lines), unknown


def decode(model, input_path, output_path):
    """Turn lines of space-separated pieces back into text."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model)
    with open(input_path, encoding="utf-8") as f:
        pieces = [line.split() for line in f.read().splitlines()]
    with open(output_path, "w", encoding="utf-8") as f:
        f.writelines(processor.decode_pieces(row) + "\n" for row in pieces)


def piece_count(model):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=model).get_piece_size()


def fairseq_dict(model, output_path):
    """Write every piece but ``<unk>`` as a fairseq dictionary (``piece count``).

    Passed to ``fairseq-preprocess --srcdict`` with ``--joined-dictionary``, it
    makes the fairseq vocabulary exactly the SentencePiece one, so a piece that the
    training text happens not to use still has an id in valid/test and at demo time.
    """
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model)
    with open(output_path, "w", encoding="utf-8") as f:
        for piece_id in range(processor.get_piece_size()):
            if not processor.is_unknown(piece_id) and not processor.is_control(piece_id):
                f.write(f"{processor.id_to_piece(piece_id)} 1\n")


def main(argv=None):
    # fmt: off
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("train", help="train one model on one or more files")
    p.add_argument("--input", nargs="+", required=True)
    p.add_argument("--model-prefix", required=True,
                   help="writes PREFIX.model and PREFIX.vocab")
    p.add_argument("--vocab-size", type=int, default=8000)
    p.add_argument("--model-type", default="unigram",
                   choices=["unigram", "bpe", "char", "word"])
    for name in ("encode", "decode"):
        p = commands.add_parser(name, help=f"{name} a file line by line")
        p.add_argument("--model", required=True)
        p.add_argument("--input", required=True)
        p.add_argument("--output", required=True)
    p = commands.add_parser("fairseq-dict", help="the model's pieces as a fairseq dict")
    p.add_argument("--model", required=True)
    p.add_argument("--output", required=True)
    args = parser.parse_args(argv)
    # fmt: on
    if args.command == "train":
        train(args.input, args.model_prefix, args.vocab_size, args.model_type)
        print(f"trained {args.model_prefix}.model ({args.vocab_size} pieces)")
    elif args.command == "encode":
        lines, unknown = encode(args.model, args.input, args.output)
        print(f"encoded {args.input}: {lines} lines, {unknown} <unk> pieces")
        if unknown:
            print(f"warning: {unknown} <unk> pieces in {args.output}", file=sys.stderr)
    elif args.command == "decode":
        decode(args.model, args.input, args.output)
    else:
        fairseq_dict(args.model, args.output)


if __name__ == "__main__":
    main()
