import multiprocessing
import os

import matplotlib
import numpy as np
import pytest
from PIL import Image, ImageSequence

from machin.utils.media import (
    create_image,
    create_image_subproc,
    create_learning_curve,
    create_video,
    create_video_subproc,
    numpy_array_to_pil_image,
    show_image,
)

CHILD_TIMEOUT = 60


def _frames(count=4, shape=(8, 10, 3)):
    return [np.full(shape, (i + 1) / count, dtype=np.float32) for i in range(count)]


def _gif_frames(path):
    with Image.open(path) as image:
        durations = [frame.info["duration"] for frame in ImageSequence.Iterator(image)]
        return image.n_frames, durations


def test_float_image_is_scaled_to_bytes(tmp_path):
    image = np.zeros((4, 6, 3), dtype=np.float64)
    image[0, 0] = [1.0, 0.5, 0.0]
    image[1, 1] = [2.0, -1.0, 0.25]  # clipped to [0, 1]
    path = create_image(image, str(tmp_path / "new_dir"), "x")
    assert path == str(tmp_path / "new_dir" / "x.png")
    with Image.open(path) as loaded:
        assert loaded.size == (6, 4) and loaded.mode == "RGB"
        pixels = np.asarray(loaded)
    assert pixels[0, 0].tolist() == [255, 128, 0]
    assert pixels[1, 1].tolist() == [255, 0, 64]


def test_integer_and_grey_images(tmp_path):
    rgb = np.array([[[300, 10, 0]]], dtype=np.int64)
    with Image.open(create_image(rgb, str(tmp_path), "int")) as loaded:
        assert np.asarray(loaded)[0, 0].tolist() == [255, 10, 0]
    grey = np.arange(6, dtype=np.uint8).reshape(2, 3, 1)
    with Image.open(create_image(grey, str(tmp_path), "grey", extension=".bmp")) as loaded:
        assert loaded.mode == "L"
        assert np.asarray(loaded).tolist() == [[0, 1, 2], [3, 4, 5]]
    rgba = np.zeros((2, 2, 4), dtype=np.uint8)
    assert numpy_array_to_pil_image(rgba).mode == "RGBA"


@pytest.mark.parametrize(
    "image, error, message",
    [
        ([[0, 1]], TypeError, "image must be a numpy array, got list"),
        (
            np.zeros((2, 2, 2)),
            ValueError,
            r"image must have shape \(H, W\) or \(H, W, C\) with C in 1, 3, 4, got \(2, 2, 2\)",
        ),
        (np.zeros(5), ValueError, "got \\(5,\\)"),
        (np.zeros((0, 3)), ValueError, "must not be empty"),
        (np.zeros((2, 2), dtype=bool), TypeError, "must have a float or integer dtype, got bool"),
    ],
)
def test_invalid_images_raise(tmp_path, image, error, message):
    with pytest.raises(error, match=message):
        create_image(image, str(tmp_path), "bad")


def test_gif_has_every_frame_at_the_given_fps(tmp_path):
    path = create_video(_frames(5), str(tmp_path), "v", fps=10)
    assert path == str(tmp_path / "v.gif")
    count, durations = _gif_frames(path)
    assert count == 5
    assert durations == [100] * 5
    with Image.open(path) as image:
        assert image.size == (10, 8)


def test_mp4_is_written_with_moviepy(tmp_path):
    from moviepy import VideoFileClip

    frames = [np.full((15, 17), i * 60, dtype=np.uint8) for i in range(4)]  # odd size, grey
    path = create_video(frames, str(tmp_path), "v", extension=".mp4", fps=8)
    clip = VideoFileClip(path)
    try:
        assert clip.fps == 8
        assert list(clip.size) == [18, 16]  # padded to even width and height
        assert len(list(clip.iter_frames())) == 4
    finally:
        clip.close()


@pytest.mark.parametrize(
    "frames, fps, error, message",
    [
        ("frames", 15, ValueError, "frames must be a non-empty list of image arrays"),
        (
            [np.zeros((2, 2)), np.zeros((3, 3))],
            15,
            ValueError,
            r"all frames must have the same shape, got shapes \[\(2, 2\), \(3, 3\)\]",
        ),
        ([np.zeros((2, 2)), "frame"], 15, TypeError, r"frames\[1\] must be a numpy array, got str"),
        ([np.zeros((2, 2))], 0, ValueError, "fps must be a positive number, got 0"),
    ],
)
def test_invalid_videos_raise(tmp_path, frames, fps, error, message):
    with pytest.raises(error, match=message):
        create_video(frames, str(tmp_path), "bad", fps=fps)
    with pytest.raises(error, match=message):
        create_video_subproc(frames, str(tmp_path), "bad", fps=fps)


@pytest.mark.multiprocess
def test_image_subproc_wait_blocks_until_the_file_exists(tmp_path):
    wait = create_image_subproc(np.ones((3, 3)), str(tmp_path), "img")
    path = wait(timeout=CHILD_TIMEOUT)
    assert path == str(tmp_path / "img.png")
    with Image.open(path) as loaded:
        assert np.asarray(loaded).tolist() == [[255] * 3] * 3
    assert wait(timeout=CHILD_TIMEOUT) == path
    assert multiprocessing.active_children() == []


@pytest.mark.multiprocess
def test_video_subproc_writes_the_gif(tmp_path):
    wait = create_video_subproc(_frames(3), str(tmp_path), "vid", fps=20, daemon=False)
    path = wait(timeout=CHILD_TIMEOUT)
    assert _gif_frames(path) == (3, [50, 50, 50])
    assert multiprocessing.active_children() == []


@pytest.mark.multiprocess
def test_subproc_failure_is_raised_by_wait(tmp_path):
    wait = create_image_subproc(np.ones((3, 3)), str(tmp_path), "img", extension=".not-a-format")
    with pytest.raises(
        RuntimeError,
        match=r"(?s)writing '.*img.not-a-format' failed in the child process:.*unknown file extension",
    ):
        wait(timeout=CHILD_TIMEOUT)
    with pytest.raises(RuntimeError, match="failed in the child process"):
        wait(timeout=CHILD_TIMEOUT)
    assert multiprocessing.active_children() == []


@pytest.mark.multiprocess
def test_subproc_checks_input_in_the_caller(tmp_path):
    with pytest.raises(TypeError, match="image must be a numpy array, got list"):
        create_image_subproc([1, 2], str(tmp_path), "img")
    assert multiprocessing.active_children() == []


def test_show_image_works_headless_and_reuses_figures():
    import matplotlib.pyplot as plt

    assert matplotlib.get_backend().lower() == "agg"
    first = np.zeros((4, 5), dtype=np.float32)
    first[0, 0] = 0.5
    figure = show_image(first, title="machin test video")
    try:
        assert len(figure.get_axes()) == 2
        original, normalized = (ax.images[0].get_array() for ax in figure.get_axes())
        assert original[0, 0] == 128
        assert normalized[0, 0] == 1.0 and normalized[1, 1] == 0.0
        second = np.full((4, 5), 0.25, dtype=np.float32)
        again = show_image(second, title="machin test video")
        assert again is figure
        assert again.get_axes()[0].images[0].get_array()[0, 0] == 64
        assert np.all(again.get_axes()[1].images[0].get_array() == 0)  # constant image
    finally:
        plt.close(figure)

    single = show_image(np.zeros((3, 3, 3), dtype=np.uint8), show_normalized=False, title="single")
    try:
        assert len(single.get_axes()) == 1
        assert single.get_axes()[0].images[0].get_array().shape == (3, 3, 3)
    finally:
        plt.close(single)


class TestCreateLearningCurve:
    def test_writes_a_png_that_reads_back(self, tmp_path):
        path = create_learning_curve(
            [1.0, 3.0, 2.0, 5.0], str(tmp_path / "plots"), "curve", title="t"
        )
        assert path == str(tmp_path / "plots" / "curve.png")
        image = np.asarray(Image.open(path))
        assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
        assert image.std() > 0  # something was drawn

    def test_explicit_steps_and_no_smoothing(self, tmp_path):
        path = create_learning_curve([0.5, 0.7], str(tmp_path), "c", steps=[100, 200], smoothing=0)
        assert os.path.getsize(path) > 0

    @pytest.mark.parametrize(
        "kwargs, message",
        [
            ({"values": []}, "values must hold at least one point"),
            ({"values": [1.0], "smoothing": 1.0}, r"smoothing must be in \[0, 1\), got 1.0"),
            (
                {"values": [1.0, 2.0], "steps": [1]},
                r"steps must have one entry per value \(2\), got 1",
            ),
        ],
    )
    def test_bad_input(self, tmp_path, kwargs, message):
        with pytest.raises(ValueError, match=message):
            create_learning_curve(path=str(tmp_path), filename="c", **kwargs)
