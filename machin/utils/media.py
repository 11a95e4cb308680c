"""Writing images and videos (for example rendered environment frames) and showing images.

Images and frames are numpy arrays of shape ``(H, W)`` (grey), ``(H, W, 1)``,
``(H, W, 3)`` (RGB) or ``(H, W, 4)`` (RGBA). Floating-point arrays hold values in
``[0, 1]`` and integer arrays values in ``[0, 255]``; values outside the range
are clipped.

GIF files are written with Pillow. Other video formats (``.mp4``, ``.webm``, ...)
are encoded by moviepy through ffmpeg; codecs such as H.264 need even frame
sizes, so frames are padded by one black row/column when needed. Pillow merges
identical consecutive GIF frames into one longer frame, which keeps the timing.

The ``*_subproc`` variants do the encoding in a child process and return a wait
function: ``wait(timeout=None)`` blocks until the file is written and returns its
path, raises ``TimeoutError`` if ``timeout`` seconds pass first, and raises
``RuntimeError`` (with the child's traceback) if the child failed.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from typing import Any, Callable, List, Optional, Sequence

import numpy as np
from PIL import Image

__all__ = [
    "create_image",
    "create_learning_curve",
    "create_image_subproc",
    "create_video",
    "create_video_subproc",
    "numpy_array_to_pil_image",
    "show_image",
]

WaitFunction = Callable[..., str]
_NON_INTERACTIVE_BACKENDS = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}
_TRACEBACK_LIMIT = 8000


def _to_uint8(image: Any, arg: str = "image") -> np.ndarray:
    """Validate an image array and convert it to uint8 of shape (H, W) or (H, W, 3|4)."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"{arg} must be a numpy array, got {type(image).__name__}")
    if not (image.ndim == 2 or (image.ndim == 3 and image.shape[2] in (1, 3, 4))):
        raise ValueError(
            f"{arg} must have shape (H, W) or (H, W, C) with C in 1, 3, 4, got {image.shape}"
        )
    if image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{arg} must not be empty, got shape {image.shape}")
    if np.issubdtype(image.dtype, np.floating):
        image = np.round(np.clip(np.nan_to_num(image), 0.0, 1.0) * 255.0)
    elif np.issubdtype(image.dtype, np.integer):
        image = np.clip(image, 0, 255)
    else:
        raise TypeError(f"{arg} must have a float or integer dtype, got {image.dtype}")
    image = image.astype(np.uint8)
    if image.ndim == 3 and image.shape[2] == 1:
        image = image[:, :, 0]
    return image


def numpy_array_to_pil_image(image: np.ndarray) -> Image.Image:
    """Convert an image array (see the module description) to a Pillow image.

    Args:
        image: Array of shape ``(H, W)``, ``(H, W, 1)``, ``(H, W, 3)`` or ``(H, W, 4)``.

    Returns:
        A Pillow image in mode ``L``, ``RGB`` or ``RGBA``.

    Raises:
        TypeError: When ``image`` is not a numpy array of a float or integer dtype.
        ValueError: When the shape is not one of the accepted ones.
    """
    return Image.fromarray(_to_uint8(image))


def _file_path(path: str, filename: str, extension: str) -> str:
    os.makedirs(path or ".", exist_ok=True)
    return os.path.join(path, filename + extension)


def _write_image(image: np.ndarray, file_path: str) -> str:
    Image.fromarray(image).save(file_path)
    return file_path


def _frames_to_uint8(frames: Sequence[np.ndarray]) -> List[np.ndarray]:
    if isinstance(frames, np.ndarray):
        frames = list(frames)
    if not isinstance(frames, (list, tuple)) or len(frames) == 0:
        raise ValueError(f"frames must be a non-empty list of image arrays, got {frames!r:.80}")
    converted = [_to_uint8(frame, f"frames[{i}]") for i, frame in enumerate(frames)]
    shapes = {frame.shape for frame in converted}
    if len(shapes) != 1:
        raise ValueError(f"all frames must have the same shape, got shapes {sorted(shapes)}")
    return converted


def _no_frames(frames: Any) -> bool:
    """Whether ``frames`` is an empty sequence (nothing to write, as in Machin 0.3.4)."""
    try:
        return len(frames) == 0
    except TypeError:
        return False


def _nothing_to_wait_for(timeout: Optional[float] = None) -> None:
    """The wait function returned when there was nothing to write."""
    return None


def _to_rgb(frame: np.ndarray) -> np.ndarray:
    if frame.ndim == 2:
        return np.repeat(frame[:, :, None], 3, axis=2)
    return frame[:, :, :3]


def _write_video(frames: List[np.ndarray], file_path: str, fps: float) -> str:
    if file_path.lower().endswith(".gif"):
        images = [Image.fromarray(_to_rgb(frame)) for frame in frames]
        images[0].save(
            file_path,
            save_all=True,
            append_images=images[1:],
            duration=max(1, round(1000.0 / fps)),
            loop=0,
        )
        return file_path

    from moviepy import ImageSequenceClip

    rgb = [_to_rgb(frame) for frame in frames]
    height, width = rgb[0].shape[:2]
    pad = ((0, height % 2), (0, width % 2), (0, 0))
    if pad[0][1] or pad[1][1]:
        rgb = [np.pad(frame, pad) for frame in rgb]
    clip = ImageSequenceClip(rgb, fps=fps)
    try:
        clip.write_videofile(file_path, fps=fps, audio=False, logger=None)
    finally:
        clip.close()
    return file_path


def _check_fps(fps: float) -> None:
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise ValueError(f"fps must be a positive number, got {fps!r}")


def create_image(image: np.ndarray, path: str, filename: str, extension: str = ".png") -> str:
    """Write an image file ``<path>/<filename><extension>``.

    Args:
        image: Image array (see the module description).
        path: Directory to write to (created if missing).
        filename: File name without extension.
        extension: File extension, which selects the format (``.png``, ``.jpg``, ...).

    Returns:
        The path of the written file.

    Raises:
        TypeError, ValueError: On an invalid image (see :func:`numpy_array_to_pil_image`).
    """
    return _write_image(_to_uint8(image), _file_path(path, filename, extension))


def create_video(
    frames: Sequence[np.ndarray], path: str, filename: str, extension: str = ".gif", fps: float = 15
) -> Optional[str]:
    """Write a video file ``<path>/<filename><extension>`` from a list of frames.

    An empty list of frames writes nothing and returns ``None``.

    Args:
        frames: Frames of equal shape (see the module description).
        path: Directory to write to (created if missing).
        filename: File name without extension.
        extension: ``.gif`` (written with Pillow) or a format moviepy/ffmpeg knows,
            such as ``.mp4``.
        fps: Frames per second.

    Returns:
        The path of the written file, ``None`` when ``frames`` is empty.

    Raises:
        TypeError, ValueError: On invalid frames, differing frame shapes or a
            non-positive ``fps``.
    """
    if _no_frames(frames):
        return None
    _check_fps(fps)
    return _write_video(_frames_to_uint8(frames), _file_path(path, filename, extension), fps)


def _run_in_child(conn: Any, function: Callable[..., str], args: tuple) -> None:
    try:
        function(*args)
        conn.send(None)
    except BaseException:  # the parent re-raises it
        conn.send(traceback.format_exc()[-_TRACEBACK_LIMIT:])
    finally:
        conn.close()


def _start_child(
    function: Callable[..., str], args: tuple, file_path: str, daemon: bool
) -> WaitFunction:
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_run_in_child, args=(sender, function, args), daemon=daemon)
    process.start()
    sender.close()
    state = {"done": False, "error": None}

    def wait(timeout: Optional[float] = None) -> str:
        """Block until the child has written the file; return its path.

        Args:
            timeout: Seconds to wait at most; ``None`` waits as long as needed.

        Raises:
            TimeoutError: When the child is still running after ``timeout`` seconds.
            RuntimeError: When writing failed in the child.
        """
        if not state["done"]:
            if not receiver.poll(timeout) and process.is_alive():
                raise TimeoutError(f"writing {file_path!r} did not finish within {timeout} seconds")
            try:
                state["error"] = receiver.recv()
            except EOFError:
                state["error"] = None if process.exitcode == 0 else "the child sent no result"
            process.join()
            receiver.close()
            if state["error"] is None and process.exitcode != 0:
                state["error"] = f"the child process exited with code {process.exitcode}"
            state["done"] = True
        if state["error"] is not None:
            raise RuntimeError(
                f"writing {file_path!r} failed in the child process:\n{state['error']}"
            )
        return file_path

    return wait


def create_image_subproc(
    image: np.ndarray, path: str, filename: str, extension: str = ".png", daemon: bool = True
) -> WaitFunction:
    """Like :func:`create_image`, but the file is written by a child process.

    The image is checked in the calling process, so invalid input raises at once.
    A daemonic child cannot be started from a daemonic process: pass
    ``daemon=False`` there.

    Args:
        image: Image array (see the module description).
        path: Directory to write to (created if missing).
        filename: File name without extension.
        extension: File extension, which selects the format.
        daemon: Whether the child process is daemonic.

    Returns:
        A wait function (see the module description).
    """
    file_path = _file_path(path, filename, extension)
    return _start_child(_write_image, (_to_uint8(image), file_path), file_path, daemon)


def create_video_subproc(
    frames: Sequence[np.ndarray],
    path: str,
    filename: str,
    extension: str = ".gif",
    fps: float = 15,
    daemon: bool = True,
) -> WaitFunction:
    """Like :func:`create_video`, but the video is encoded by a child process.

    The frames are checked in the calling process, so invalid input raises at once.
    A daemonic child cannot be started from a daemonic process: pass
    ``daemon=False`` there.

    Args:
        frames: Frames of equal shape (see the module description).
        path: Directory to write to (created if missing).
        filename: File name without extension.
        extension: ``.gif`` or a format moviepy/ffmpeg knows, such as ``.mp4``.
        fps: Frames per second.
        daemon: Whether the child process is daemonic.

    Returns:
        A wait function (see the module description). When ``frames`` is empty no
        process is started and the wait function returns ``None`` at once.
    """
    if _no_frames(frames):
        return _nothing_to_wait_for
    _check_fps(fps)
    converted = _frames_to_uint8(frames)
    file_path = _file_path(path, filename, extension)
    return _start_child(_write_video, (converted, file_path, fps), file_path, daemon)


def _interactive_backend() -> bool:
    import matplotlib

    backend = matplotlib.get_backend().lower()
    try:
        from matplotlib.backends import BackendFilter, backend_registry

        non_interactive = set(backend_registry.list_builtin(BackendFilter.NON_INTERACTIVE))
    except ImportError:  # matplotlib < 3.9
        non_interactive = _NON_INTERACTIVE_BACKENDS
    return backend not in non_interactive


def show_image(
    image: np.ndarray, show_normalized: bool = True, pause_time: float = 0.01, title: str = ""
):
    """Show an image in a matplotlib figure.

    Calling it again with the same ``title`` updates the same figure, so a sequence
    of calls plays a video. With a non-interactive backend (such as ``Agg`` on a
    machine without a display) the figure is drawn off screen and nothing waits.

    Args:
        image: Image array (see the module description).
        show_normalized: Also show the image rescaled so its minimum is black and its
            maximum white.
        pause_time: Seconds to let an interactive window update before returning.
        title: Title of the figure window; figures are reused by title.

    Returns:
        The ``matplotlib.figure.Figure`` showing the image.

    Raises:
        TypeError, ValueError: On an invalid image (see :func:`numpy_array_to_pil_image`).
    """
    import matplotlib.pyplot as plt

    shown = _to_uint8(image)
    views = [shown]
    if show_normalized:
        values = np.asarray(image, dtype=np.float64)
        if values.ndim == 3 and values.shape[2] == 1:
            values = values[:, :, 0]
        span = values.max() - values.min()
        views.append((values - values.min()) / span if span > 0 else np.zeros_like(values))

    figure = plt.figure(num=title or "machin image")
    axes = figure.get_axes()
    reusable = len(axes) == len(views) and all(
        len(ax.images) == 1 and ax.images[0].get_array().shape == view.shape
        for ax, view in zip(axes, views)
    )
    if reusable:
        for ax, view in zip(axes, views):
            ax.images[0].set_data(view)
    else:
        figure.clf()
        for index, view in enumerate(views):
            ax = figure.add_subplot(1, len(views), index + 1)
            ax.imshow(
                view, cmap="gray" if view.ndim == 2 else None, vmin=0, vmax=1 if index else 255
            )
            ax.set_title("normalized" if index else "original")
            ax.axis("off")
    if title:
        figure.suptitle(title)
    if _interactive_backend():
        plt.pause(pause_time)
    else:
        figure.canvas.draw()
    return figure


def create_learning_curve(
    values: Sequence[float],
    path: str,
    filename: str,
    title: str = "",
    xlabel: str = "episode",
    ylabel: str = "return",
    smoothing: float = 0.9,
    steps: Optional[Sequence[float]] = None,
    extension: str = ".png",
) -> str:
    """Plot a learning curve (the raw values and their exponential moving average) to a file.

    Drawn off screen with matplotlib's ``Agg`` canvas, so it works on machines
    without a display and does not touch pyplot's global figures.

    Args:
        values: One value per point (for example the return of each episode).
        path: Directory to write to (created if missing).
        filename: File name without extension.
        title: Title of the plot.
        xlabel: Label of the x axis.
        ylabel: Label of the y axis.
        smoothing: Weight of the past in the moving average, in ``[0, 1)``;
            ``0`` draws only the raw values.
        steps: The x coordinate of each value (default: 1, 2, ...).
        extension: File extension, which selects the format (``.png``, ``.svg``, ...).

    Returns:
        The path of the written file.

    Raises:
        ValueError: If ``values`` is empty, ``steps`` has a different length, or
            ``smoothing`` is outside ``[0, 1)``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    if values.size == 0:
        raise ValueError("values must hold at least one point, got none")
    if not 0 <= smoothing < 1:
        raise ValueError(f"smoothing must be in [0, 1), got {smoothing!r}")
    x = np.arange(1, values.size + 1) if steps is None else np.asarray(steps, dtype=np.float64)
    if x.shape != values.shape:
        raise ValueError(f"steps must have one entry per value ({values.size}), got {x.size}")
    figure = Figure(figsize=(6, 3.5))
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 1, 1)
    ax.plot(x, values, alpha=0.35 if smoothing else 1.0, label="raw")
    if smoothing:
        smoothed = np.empty_like(values)
        smoothed[0] = values[0]
        for i in range(1, values.size):
            smoothed[i] = smoothing * smoothed[i - 1] + (1 - smoothing) * values[i]
        ax.plot(x, smoothed, label=f"moving average ({smoothing:g})")
        ax.legend(loc="best")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    figure.tight_layout()
    file_path = _file_path(path, filename, extension)
    figure.savefig(file_path)
    return file_path
