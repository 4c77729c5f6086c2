"""Make fairseq's ``--replace-unk`` work with this fairseq's hard alignments.

fairseq-generate/-interactive compute ``hypo["alignment"]`` as a list of
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
limits that can be raised instead. Nothing else in fairseq is touched.
"""

import fairseq.utils as fairseq_utils
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


if getattr(fairseq_utils.replace_unk, "__module__", None) != __name__:
    fairseq_utils.replace_unk = replace_unk
if getattr(FairseqTask.filter_indices_by_size, "__module__", None) != __name__:
    FairseqTask.filter_indices_by_size = filter_indices_by_size
