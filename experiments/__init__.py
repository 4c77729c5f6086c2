"""The project's studies: what chose make demo's settings and what the docs report.

Run each from the repository root as ``python -m experiments.NAME`` (``make ladder``
runs the ladder). Each writes one JSON file per run under ``docs/experiments/NAME/``
and renders the page that shows them (harness.py: what they share):

- ``compare``: learning per update, one change at a time, against fairseq's ``lstm``
  (docs/COMPARE.md, with ``trajectory`` and ``bf16_parts``: compare_page.py);
- ``trajectory``: the fast paths against the paper's loop, update by update;
- ``bf16_parts``: which products bf16 may take;
- ``budget``: make demo's model and its peers at equal time (docs/BUDGET.md);
- ``ladder``: the papers' Tables 1 and 4 at CPU scale, word level (docs/RESULTS.md);
- ``corpus_compare``: make demo's choices on another corpus and its own, per update (docs/CORPORA.md);
- ``corpus_budget``: the same choices at equal time on two corpora, BLEU (docs/CORPUS_BUDGET.md);
- ``length_penalty``: a corpus_budget sitting's runs decoded again, the length penalty
  chosen on the valid split (docs/LENGTH_PENALTY.md);
- ``source_dependence``: whether a checkpoint reads its source.

Nothing in ``luong_plugin`` imports this package.
"""
