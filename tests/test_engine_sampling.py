"""The training order: length-bucketed batches, shuffled over the epoch, classes spread over the batches."""
import random

import torch

from jobs.training.sampling import WINDOW_BATCHES, BucketedSampler, bucketed_indices


def _batches(order, size):
    return [order[i:i + size] for i in range(0, len(order), size)]


def _spam_like(n, seed=0):
    """Length predicts the class, as in SMS: class 1 (13%) is long, class 0 short."""
    rng = random.Random(seed)
    strata = [1 if rng.random() < 0.13 else 0 for _ in range(n)]
    lengths = [rng.randint(30, 60) if s else rng.randint(3, 30) for s in strata]
    return lengths, strata


def test_every_example_once_and_only_the_last_batch_short():
    lengths, strata = _spam_like(1003)
    for groups in (None, strata):
        order = bucketed_indices(lengths, 16, groups, generator=torch.Generator().manual_seed(1))
        assert sorted(order) == list(range(1003))
        assert [len(b) for b in _batches(order, 16)] == [16] * 62 + [11]


def test_batches_are_length_buckets_and_cost_less_padding_than_random():
    lengths, _ = _spam_like(3200)
    order = bucketed_indices(lengths, 16, generator=torch.Generator().manual_seed(2))
    padded = sum(16 * max(lengths[i] for i in b) for b in _batches(order, 16))
    random_order = torch.randperm(3200, generator=torch.Generator().manual_seed(2)).tolist()
    padded_random = sum(16 * max(lengths[i] for i in b) for b in _batches(random_order, 16))
    assert padded < 0.75 * padded_random
    for batch in _batches(order, 16):
        assert max(lengths[i] for i in batch) - min(lengths[i] for i in batch) <= 6


def test_batch_order_is_shuffled_not_longest_to_shortest():
    """transformers' sampler walks each window longest → shortest; here batch lengths must not trend down."""
    lengths, _ = _spam_like(16 * WINDOW_BATCHES)  # one window
    order = bucketed_indices(lengths, 16, generator=torch.Generator().manual_seed(3))
    maxima = [max(lengths[i] for i in b) for b in _batches(order, 16)]
    assert maxima[0] == max(lengths)  # the longest batch first: out-of-memory shows at step 1
    rest = maxima[1:]
    descending = sum(a >= b for a, b in zip(rest, rest[1:]))
    assert descending < 0.75 * (len(rest) - 1)
    assert max(rest[-10:]) > min(rest[:10])  # the epoch does not end on the shortest batches


def test_strata_put_each_class_in_every_batch_in_proportion():
    lengths, strata = _spam_like(2000, seed=4)
    share = sum(strata) / len(strata)
    plain = bucketed_indices(lengths, 16, generator=torch.Generator().manual_seed(5))
    mixed = bucketed_indices(lengths, 16, strata, generator=torch.Generator().manual_seed(5))
    single_class = lambda order: sum(len({strata[i] for i in b}) == 1 for b in _batches(order, 16))  # noqa: E731
    assert single_class(plain) > 80  # without strata, length alone sorts the classes apart
    full = _batches(mixed, 16)[:-1]
    for batch in full:
        assert abs(sum(strata[i] for i in batch) - 16 * share) <= 2
    assert single_class(mixed) <= 5


def test_sampler_draws_a_new_order_each_epoch_from_the_seeded_global_generator():
    lengths, strata = _spam_like(500)
    sampler = BucketedSampler(lengths, 8, strata)
    torch.manual_seed(42)
    first, second = list(sampler), list(sampler)
    torch.manual_seed(42)
    assert list(sampler) == first and first != second and len(sampler) == 500


def test_tiny_and_empty_inputs():
    assert bucketed_indices([], 8) == []
    assert sorted(bucketed_indices([5, 1, 3], 8, [0, 1, 0])) == [0, 1, 2]
