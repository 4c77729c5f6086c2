"""Narrow mends of fairseq bugs that users of the plugin hit, installed on import.

``--replace-unk``: fairseq-generate/-interactive compute ``hypo["alignment"]`` as a list of
(source word, target word) pairs (``utils.extract_hard_alignment``), but
``utils.replace_unk`` still indexes it as a list of source positions, one per
target word, and fails with ``TypeError: list indices must be integers or
slices, not tuple``. Luong et al. (2015) §4.1 need unk replacement, so on import
the plugin wraps ``replace_unk``: pair lists are turned into the per-target list
it expects. Alignments already in that form go to the original unchanged, and a
missing alignment (no ``--print-alignment``) gets a clear error instead of an
IndexError.

A source longer than the task's ``--max-source-positions`` stops fairseq with
"Size of sample #N is invalid ..., skip this example with
--skip-invalid-size-inputs-valid-test"; the message is extended to name the
limits that can be raised instead.

Diverse beam search (``--diverse-beam-groups G``): ``DiverseBeamSearch`` keeps
the overlap between groups in one row per sentence of the batch, but indexes
it with the sentences' dataset ids (``original_batch_idxs``), so any batch
holding a sample id >= its size (every batch of a real test set but the
first) stops with ``IndexError``, and smaller ids read other sentences' rows.
The mend indexes the rows by position in the current batch and drops the rows
of finished sentences when the generator removes them (``prune_sentences``),
so a sentence's hypotheses no longer depend on its batch.

``--print-step`` prints ``hypo["steps"]``, which only the iterative refinement
generator records; fairseq's beam search ``SequenceGenerator`` stops with
``KeyError: 'steps'``. The mend records, for each of its hypotheses, the
number of decoding steps that produced it: its length in tokens, ``</s>``
included.

``--bf16`` (and ``--memory-efficient-bf16``) imply ``--tpu`` in fairseq 0.12
(``fairseq/options.py``), whatever the machine: without torch_xla the trainer
stops with ``AttributeError: 'NoneType' object has no attribute 'xla_device'``,
for fairseq's own ``lstm`` as for the plugin's models. The mend stops it with a
message that says why and what runs instead. Nothing else in fairseq is touched.
"""

import sys

import fairseq.utils as fairseq_utils
import torch
from fairseq.search import DiverseBeamSearch
from fairseq.sequence_generator import SequenceGenerator
from fairseq.tasks.fairseq_task import FairseqTask

_original_replace_unk = fairseq_utils.replace_unk


def source_positions(alignment, n_target):
    """[(src, tgt), ...] -> [src for tgt 0 .. n_target - 1] (eos: the last source token)."""
    by_target = {int(tgt): int(src) for src, tgt in alignment}
    return [by_target.get(tgt, -1) for tgt in range(n_target)]


def replace_unk(hypo_str, src_str, alignment, align_dict, unk):
    if unk in hypo_str.split():
        if alignment is None or len(alignment) == 0:
            raise ValueError(
                "--replace-unk needs the attention alignment of each hypothesis: "
                "add --print-alignment (hard)"
            )
        if isinstance(alignment[0], (tuple, list)):
            alignment = source_positions(alignment, len(hypo_str.split()))
    return _original_replace_unk(hypo_str, src_str, alignment, align_dict, unk)


_original_filter_indices_by_size = FairseqTask.filter_indices_by_size


def filter_indices_by_size(self, indices, dataset, max_positions=None, ignore_invalid_inputs=False):
    try:
        return _original_filter_indices_by_size(
            self, indices, dataset, max_positions, ignore_invalid_inputs
        )
    except Exception as err:  # fairseq raises a bare Exception
        if not str(err).startswith("Size of sample #"):
            raise
        raise ValueError(
            f"{err}, or raise the limit with --max-source-positions / "
            "--max-target-positions (max_positions is (source, target); only "
            "--attention-score location has a limit of its own, the number of "
            "positions it was trained with)"
        ) from None


_original_diverse_step = DiverseBeamSearch.step


def diverse_step(self, step, lprobs, scores, prev_output_tokens=None, original_batch_idxs=None):
    rows = torch.arange(lprobs.size(0), device=lprobs.device)  # B: group_overlap's rows
    return _original_diverse_step(self, step, lprobs, scores, prev_output_tokens, rows)


def diverse_prune_sentences(self, batch_idxs):
    """Keep the group overlap of the sentences still being decoded (B' x G x G)."""
    if self.group_overlap.numel() > 0:
        self.group_overlap = self.group_overlap[batch_idxs]


_original_generate = SequenceGenerator._generate


def generate_with_steps(self, sample, *args, **kwargs):
    finalized = _original_generate(self, sample, *args, **kwargs)
    for hypos in finalized:
        for hypo in hypos:
            hypo.setdefault("steps", hypo["tokens"].numel())
    return finalized


_original_get_tpu_device = fairseq_utils.get_tpu_device

BF16_REFUSAL = (
    "fairseq's --bf16 and --memory-efficient-bf16 imply --tpu (fairseq/options.py) and need "
    "torch_xla, which is not installed: fairseq's own bf16 runs on TPUs only, for every model. "
    "For bf16 on a CPU or a GPU use the plugin's --precision bf16 (mixed precision); on a GPU, "
    "--fp16, --memory-efficient-fp16 and --amp work too"
)


def get_tpu_device():
    if fairseq_utils.xm is None:
        sys.exit(f"error: {BF16_REFUSAL}")
    return _original_get_tpu_device()


def _install(owner, name, function):
    if getattr(getattr(owner, name), "__module__", None) != __name__:
        setattr(owner, name, function)


_install(DiverseBeamSearch, "step", diverse_step)
_install(DiverseBeamSearch, "prune_sentences", diverse_prune_sentences)
_install(SequenceGenerator, "_generate", generate_with_steps)
_install(fairseq_utils, "replace_unk", replace_unk)
_install(FairseqTask, "filter_indices_by_size", filter_indices_by_size)
_install(fairseq_utils, "get_tpu_device", get_tpu_device)
