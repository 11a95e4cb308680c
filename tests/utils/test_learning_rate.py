import pytest
import torch
from torch.optim.lr_scheduler import LambdaLR

from machin.utils.learning_rate import gen_learning_rate_func


def test_piecewise_constant_values():
    lr_func = gen_learning_rate_func([(0, 1e-3), (200000, 3e-4)])
    assert lr_func(0) == 1e-3
    assert lr_func(199999) == 1e-3
    assert lr_func(200000) == 3e-4
    assert lr_func(10**7) == 3e-4


def test_steps_before_the_first_entry_use_the_first_value():
    lr_func = gen_learning_rate_func([(10, 0.5), (20, 0.25)])
    assert lr_func(0) == 0.5
    assert lr_func(15) == 0.5
    assert lr_func(20) == 0.25


def test_logger_reports_each_change_once(recording_logger):
    lr_func = gen_learning_rate_func([(0, 1.0), (2, 0.5)], logger=recording_logger)
    for step in range(4):
        lr_func(step)
    assert recording_logger.messages("info") == [
        "learning rate is 1.0 from step 0",
        "learning rate is 0.5 from step 2",
    ]


def test_works_as_lambda_lr_multiplier():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([param], lr=1.0)
    scheduler = LambdaLR(optimizer, gen_learning_rate_func([(0, 0.1), (2, 0.01)]))
    seen = []
    for _ in range(3):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert seen == pytest.approx([0.1, 0.1, 0.01])


@pytest.mark.parametrize(
    "lr_map, message",
    [
        ([], "at least one"),
        ([(0, 1.0), (0, 2.0)], r"strictly increase, got \[0, 0\]"),
        ([(5, 1.0), (2, 2.0)], r"strictly increase, got \[5, 2\]"),
        ([(0, 1.0, 2)], r"number pairs, got \(0, 1.0, 2\)"),
        ([(0, "fast")], "number pairs"),
    ],
)
def test_invalid_maps_raise(lr_map, message):
    with pytest.raises(ValueError, match=message):
        gen_learning_rate_func(lr_map)
