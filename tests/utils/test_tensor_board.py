import pytest
from tensorboardX import SummaryWriter

from machin.utils.tensor_board import TensorBoard, default_board


def test_board_is_initiated_by_init(tmp_path, read_scalars):
    board = TensorBoard()
    assert board.is_initiated() is False
    assert board.writer is None
    board.init(str(tmp_path))
    assert board.is_initiated() is True
    assert isinstance(board.writer, SummaryWriter)
    board.writer.add_scalar("loss", 0.5, 7)
    board.writer.close()
    assert read_scalars(str(tmp_path)) == {"loss": [(7, 0.5)]}


def test_init_passes_keyword_arguments(tmp_path):
    board = TensorBoard()
    board.init(logdir=str(tmp_path / "kw"), flush_secs=1)
    assert board.writer.logdir == str(tmp_path / "kw")
    board.writer.close()


def test_init_twice_raises(tmp_path):
    board = TensorBoard()
    board.init(str(tmp_path))
    with pytest.raises(RuntimeError, match="already has a writer"):
        board.init(str(tmp_path))
    board.writer.close()


def test_default_board_is_a_global_board():
    assert isinstance(default_board, TensorBoard)
