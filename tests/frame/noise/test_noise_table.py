"""machin.frame.noise.noise_table: the seeded noise table and its slice sampler (used by ARS)."""

import pytest
import torch

from machin.frame.noise.noise_table import NoiseTable, SharedNoiseSampler


# -- shared noise -----------------------------------------------------------------------------
def test_noise_table_is_rebuilt_from_its_seed_and_sliced_consistently():
    table, same, other = (NoiseTable(100000, 0.5, seed, block_size=1000) for seed in (7, 7, 8))
    assert len(table) == 100000
    whole = table[2500:7300]
    assert torch.equal(whole, same[2500:7300]) and not torch.equal(whole, other[2500:7300])
    assert torch.equal(whole, torch.cat([table[2500:3000], table[3000:6999], table[6999:7300]]))
    assert torch.equal(table[99990:100000], same[99990:])  # the shorter last block
    assert whole.dtype == torch.float64 and abs(whole.std().item() - 0.5) < 0.03
    whole.zero_()
    assert torch.equal(table[2500:2600], same[2500:2600]), (
        "a slice must not share memory with the table"
    )
    small = NoiseTable(10**6, seed=0, block_size=1000, cache_bytes=4 * 8 * 1000)
    for start in range(0, 10**6, 50000):
        small[start : start + 10]
    assert len(small._blocks) == 4, "the block cache must stay within cache_bytes"
    with pytest.raises(ValueError, match="must be contiguous"):
        table[0:10:2]


def test_shared_noise_sampler_draws_the_same_slices_for_the_same_seed():
    table = NoiseTable(5000, 0.02, seed=1)
    first, second, third = (
        SharedNoiseSampler(table, 3),
        SharedNoiseSampler(table, 3),
        SharedNoiseSampler(table, 4),
    )
    draws = [first.sample(40) for _ in range(5)]
    again = [second.sample(40) for _ in range(5)]
    assert [i for i, _ in draws] == [i for i, _ in again]
    assert [i for i, _ in draws] != [third.sample(40)[0] for _ in range(5)]
    for index, values in draws:
        assert values.shape == (40,) and 0 <= index <= 5000 - 40
        assert torch.equal(values, first.get(index, 40))
    tensor_noise = torch.arange(10, dtype=torch.float64)
    assert SharedNoiseSampler(tensor_noise, 0).get(3, 4).tolist() == [3.0, 4.0, 5.0, 6.0]
    assert SharedNoiseSampler(tensor_noise, 0).sample(10)[0] == 0
    with pytest.raises(ValueError, match=r"size must be an int in \[1, 10\]"):
        SharedNoiseSampler(tensor_noise, 0).sample(11)
    with pytest.raises(ValueError, match=r"idx must be in \[0, 6\]"):
        SharedNoiseSampler(tensor_noise, 0).get(7, 4)
    with pytest.raises(AssertionError, match="noise must be a 1-D floating-point tensor"):
        SharedNoiseSampler(torch.arange(10), 0)
