"""The held-out splits of the Debian documentation corpus (debian_docs.py): whole help pages
go to valid and test, catalogs only train, and a held-out sentence seen in training is
dropped; then the files ``refs.SPLIT``, ``SPLIT.en`` and ``SPLIT.fr`` that prepare.sh reads.
A pair is ``(ref, en, fr)``, its ref ``"source:document#block.sentence"``."""

import os
import random

SPLITS = ("train", "valid", "test")


def held_out_eligible(doc):
    """Only help pages are held out; catalogs (``source:file.mo``) only train."""
    return not doc.endswith(".mo")


def split_documents(documents, seed=1, n_valid=1000, n_test=1000):
    """Hold out whole documents: ``({split: [(ref, en, fr)]}, {split: docs})``.

    Eligible documents are visited in a seeded order; one goes to valid while it fits
    in ``n_valid`` pairs, else to test while it fits in ``n_test``, else to train. A
    document larger than a tenth of a split is not held out in it, so each held-out
    split has ten documents or more rather than one long page.
    Valid and test then drop pairs whose English side is in train (test also those in
    valid), so no held-out source sentence was seen in training.
    """
    order = sorted(doc for doc, _ in documents if held_out_eligible(doc))
    random.Random(seed).shuffle(order)
    sizes = dict(documents)
    assignment, size = {}, {"valid": 0, "test": 0}
    for doc in order:
        n = len(sizes[doc])
        for split, limit in (("valid", n_valid), ("test", n_test)):
            if n <= max(1, limit // 10) and size[split] + n <= limit:
                assignment[doc], size[split] = split, size[split] + n
                break
    splits = {split: [] for split in SPLITS}
    docs = {split: set() for split in SPLITS}
    for doc, pairs in documents:
        split = assignment.get(doc, "train")
        splits[split].extend(pairs)
        docs[split].add(doc)
    seen = {en for _, en, _ in splits["train"]}
    for split in ("valid", "test"):
        splits[split] = [pair for pair in splits[split] if pair[1] not in seen]
        seen |= {en for _, en, _ in splits[split]}
    return splits, docs


def subsample(pairs, n, seed=1):
    """The first ``n`` pairs after a seeded shuffle, back in their original order."""
    if n is None or n >= len(pairs):
        return list(pairs)
    keep = set(random.Random(seed).sample(range(len(pairs)), n))
    return [pair for i, pair in enumerate(pairs) if i in keep]


def document_of(ref):
    """``"gimp-help:gimp-tool-crop.html#7.2"`` → ``"gimp-help:gimp-tool-crop.html"``."""
    return ref.rsplit("#", 1)[0]


def write_splits(splits, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for split, pairs in splits.items():
        for name, column in (("refs", 0), ("en", 1), ("fr", 2)):
            path = f"refs.{split}" if name == "refs" else f"{split}.{name}"
            with open(os.path.join(out_dir, path), "w", encoding="utf-8") as f:
                f.writelines(pair[column] + "\n" for pair in pairs)
