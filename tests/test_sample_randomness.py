"""mappers.random_state: the per-sample derivation seed -> (position, attempt) -> generator."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from mappers.random_state import (
    SampleRandomness,
    attempt_generator,
    attempt_seed,
    current_sample,
    get_generator,
    index_sample_seed,
    sample_scope,
    sample_seed,
    seed_global_rngs,
    use_generator,
)


def _global_draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.random()), float(torch.rand(1))


def test_derivation_is_a_pure_function_of_its_parts():
    assert sample_seed(1, 2) == sample_seed(1, 2)
    assert len({sample_seed(1, 2), sample_seed(1, 3), sample_seed(2, 2), index_sample_seed(1, 2)}) == 4
    assert attempt_seed(99, 0) == 99
    assert len({attempt_seed(99, a) for a in range(5)}) == 5
    assert attempt_generator(99, 3).random() == attempt_generator(99, 3).random()


def test_derived_seeds_are_numpys_seed_sequence_of_the_parts_plus_one():
    from catalog._common import derive_seed

    def by_definition(*parts):  # None counts as -1; a negative part wraps every part to 64 bits
        entropy = [0 if p is None else p + 1 for p in parts]
        entropy = [e % 2**64 for e in entropy] if any(e < 0 for e in entropy) else entropy
        low, high = np.random.SeedSequence(entropy).generate_state(2, dtype=np.uint32)
        return ((int(low) << 31) ^ int(high)) & (2**63 - 1)

    rng = np.random.default_rng(5)
    cases = [(0,), (None, 3), (-2, 7), (2**32 - 2,), (2**32 - 1, 0), (2**64 - 1,), (2**70, -9)]
    cases += [tuple(int(v) for v in rng.integers(-2**62, 2**62, size=k)) for k in (1, 2, 3, 4, 5)]
    for parts in cases:  # saved states and every batch depend on these values staying put
        assert derive_seed(*parts) == by_definition(*parts), parts


def test_scope_gives_the_attempt_generator_and_sets_an_outer_override_aside():
    outer = np.random.default_rng(0)
    with use_generator(outer):
        with sample_scope(5, seed_globals=False) as sample:
            assert current_sample() is sample and get_generator() is sample.generator
            first = get_generator().random()
            inner = np.random.default_rng(1)
            with use_generator(inner):
                assert get_generator() is inner  # an explicit rng wins inside a sample
            second_attempt = sample.next_attempt()
            assert sample.attempt == 1 and get_generator() is second_attempt
        assert get_generator() is outer and current_sample() is None
    assert first == np.random.default_rng(attempt_seed(5, 0)).random()
    assert second_attempt.random() != np.random.default_rng(attempt_seed(5, 0)).random()


def test_each_attempt_seeds_the_global_rngs():
    with sample_scope(7):
        a0 = _global_draws()
        with sample_scope(7):
            assert _global_draws() == a0  # the same sample, the same global draws
        sample = current_sample()
        sample.next_attempt()
        a1 = _global_draws()
    with sample_scope(8):
        b0 = _global_draws()
    assert a0 != a1 and a0 != b0
    seed_global_rngs(attempt_seed(7, 1))
    assert _global_draws() == a1


def test_main_process_global_states_are_restored():
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    expected = _global_draws()
    random.seed(3)
    np.random.seed(3)
    torch.manual_seed(3)
    with sample_scope(12) as sample:
        _global_draws()
        sample.next_attempt()
        _global_draws()
    assert _global_draws() == expected


@pytest.mark.parametrize(("bad", "error"), [(-1, ValueError), (2**64, ValueError),
                                            (1.5, TypeError), (True, TypeError)])
def test_invalid_sample_seeds(bad, error):
    with pytest.raises(error, match="seed"):
        with sample_scope(bad):
            pass
    with pytest.raises(error, match="seed"):
        SampleRandomness(bad)
    with pytest.raises(error, match="seed"):
        seed_global_rngs(bad)
