"""--replace-unk with the (source, target) pairs fairseq's generator produces."""

import pytest
import torch
from fairseq import utils

import luong_plugin  # noqa: F401  (installs the fix)
from luong_plugin.fairseq_fixes import source_positions


def test_pairs_become_one_source_position_per_target_word():
    assert source_positions([(2, 0), (0, 1), (2, 2)], 3) == [2, 0, 2]


def test_replace_unk_copies_the_aligned_source_word():
    hypo = "the <unk> of <unk>"
    src = "la casa de Jehová"
    alignment = [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert utils.replace_unk(hypo, src, alignment, {}, "<unk>") == "the casa of Jehová"
    assert (
        utils.replace_unk(hypo, src, alignment, {"casa": "house"}, "<unk>") == "the house of Jehová"
    )


def test_per_target_lists_still_work():
    assert utils.replace_unk("a <unk>", "x y", [0, 1], {}, "<unk>") == "a y"


def test_missing_alignment_is_a_clear_error():
    import torch

    with pytest.raises(ValueError, match="add --print-alignment"):
        utils.replace_unk("a <unk>", "x y", torch.empty(0), {}, "<unk>")
    assert utils.replace_unk("a b", "x y", torch.empty(0), {}, "<unk>") == "a b"


def test_too_long_source_names_the_limits_to_raise():
    import numpy as np
    from conftest import make_dictionary
    from fairseq.data import LanguagePairDataset
    from fairseq.tasks.fairseq_task import FairseqTask

    d = make_dictionary()
    src = [torch_row(n) for n in (3, 9)]
    dataset = LanguagePairDataset(src, [len(s) for s in src], d)
    task = FairseqTask.__new__(FairseqTask)
    indices = np.arange(2)
    with pytest.raises(
        ValueError,
        match=r"Size of sample #1 .*skip this example with "
        r"--skip-invalid-size-inputs-valid-test, or raise the limit with "
        r"--max-source-positions",
    ):
        task.filter_indices_by_size(indices, dataset, max_positions=5)
    kept = task.filter_indices_by_size(
        indices, dataset, max_positions=5, ignore_invalid_inputs=True
    )
    assert list(kept) == [0]


def torch_row(n):
    import torch

    return torch.arange(4, 4 + n)


# ---- diverse beam search and --print-step through fairseq's SequenceGenerator ----


def diverse_generator(model, beam=4, groups=2):
    from fairseq.search import DiverseBeamSearch
    from fairseq.sequence_generator import SequenceGenerator

    tgt_dict = model.decoder.dictionary
    search = DiverseBeamSearch(tgt_dict, num_groups=groups, diversity_strength=0.5)
    return SequenceGenerator(
        [model], tgt_dict, beam_size=beam, max_len_b=12, search_strategy=search
    )


def generate(generator, model, src, lengths, ids):
    sample = {"id": torch.tensor(ids), "net_input": {"src_tokens": src, "src_lengths": lengths}}
    with torch.no_grad():
        return generator.generate([model], sample)


@pytest.mark.parametrize("arch", ["luong_tiny", "bahdanau_tiny"])
def test_diverse_beam_search_with_sample_ids_beyond_the_batch(arch):
    """fairseq indexed the groups' overlap by sample id: IndexError for id >= batch
    size. Each sentence's hypotheses must also be those it gets decoded alone."""
    from conftest import build, random_batch, spread_parameters

    model = spread_parameters(build(arch))
    src, lengths = random_batch(model.encoder.dictionary, [9, 6, 4])
    batch = generate(diverse_generator(model), model, src, lengths, [57, 3, 12])
    assert len(batch) == 3
    for row in range(3):
        n = int(lengths[row])
        alone = generate(
            diverse_generator(model), model, src[row : row + 1, -n:], lengths[row : row + 1], [0]
        )
        assert [h["tokens"].tolist() for h in batch[row]] == [
            h["tokens"].tolist() for h in alone[0]
        ]
        assert [float(h["score"]) for h in batch[row]] == pytest.approx(
            [float(h["score"]) for h in alone[0]], abs=1e-5
        )


def test_hypotheses_record_their_decoding_steps():
    """--print-step prints hypo["steps"] (KeyError: 'steps' without the mend)."""
    from conftest import build, random_batch, spread_parameters
    from fairseq.sequence_generator import SequenceGenerator

    model = spread_parameters(build("luong_tiny"))
    src, lengths = random_batch(model.encoder.dictionary, [5, 3])
    generator = SequenceGenerator([model], model.decoder.dictionary, beam_size=2, max_len_b=8)
    for hypos in generate(generator, model, src, lengths, [0, 1]):
        for hypo in hypos:
            assert hypo["steps"] == hypo["tokens"].numel() > 0
