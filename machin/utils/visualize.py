"""Drawing the autograd graph behind a tensor.

:func:`visualize_graph` walks ``final_tensor.grad_fn`` and its
``next_functions`` and writes the graph as Graphviz DOT text, one node per
backward function. Leaf tensors that receive gradients (the ``AccumulateGrad``
nodes) are drawn as boxes labelled with their shape, and with their name when a
``params`` mapping is given. Edges point in the direction of the forward
computation, from inputs towards ``final_tensor``. When the Graphviz ``dot``
program is on ``PATH`` the graph is also rendered to a PNG next to the DOT file.

Tensors created without gradient tracking (for example noise added in place
under ``torch.no_grad()``) are not part of the graph and do not show up.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from .logging import default_logger

__all__ = ["visualize_graph"]


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _shape(tensor: torch.Tensor) -> str:
    return str(list(tensor.shape))


def _graph_dot(final_tensor: torch.Tensor, params: Optional[Mapping[str, torch.Tensor]]) -> str:
    param_names: Dict[int, str] = {id(tensor): name for name, tensor in (params or {}).items()}
    # Python wrappers of autograd nodes live only while referenced, and a node seen twice
    # is the same wrapper only while the first one is alive: ``nodes`` keeps every
    # wrapper alive, so ``id`` identifies nodes for the whole walk.
    nodes: Dict[int, Tuple[str, Any]] = {}
    node_lines: List[str] = []
    edge_lines: List[str] = []

    def node_id(fn: Any) -> str:
        key = id(fn)
        if key not in nodes:
            nodes[key] = (f"n{len(nodes)}", fn)
            variable = getattr(fn, "variable", None)
            if isinstance(variable, torch.Tensor):
                label = f"{param_names.get(id(variable), 'leaf')}\n{_shape(variable)}"
                style = 'shape=box, style=filled, fillcolor="lightblue"'
            else:
                label = type(fn).__name__
                style = "shape=ellipse"
            node_lines.append(f"  {nodes[key][0]} [label={_quote(label)}, {style}];")
        return nodes[key][0]

    out_label = _quote(f"output\n{_shape(final_tensor)}")
    output_line = (
        f'  out [label={out_label}, shape=box, style=filled, fillcolor="darkolivegreen1"];'
    )
    root = final_tensor.grad_fn
    edge_lines.append(f"  {node_id(root)} -> out;")
    stack = [root]
    expanded = {id(root)}
    while stack:
        fn = stack.pop()
        for next_fn, _ in fn.next_functions:
            if next_fn is None:
                continue
            edge_lines.append(f"  {node_id(next_fn)} -> {node_id(fn)};")
            if id(next_fn) not in expanded:
                expanded.add(id(next_fn))
                stack.append(next_fn)

    return "\n".join(
        ["digraph autograd {", "  rankdir=BT;", output_line, *node_lines, *edge_lines, "}", ""]
    )


def visualize_graph(
    final_tensor: torch.Tensor,
    visualize_dir: str = "",
    exit_after_vis: bool = True,
    *,
    name: str = "graph",
    params: Optional[Mapping[str, torch.Tensor]] = None,
) -> str:
    """Write the autograd graph that ends at ``final_tensor`` to ``<visualize_dir>/<name>.dot``.

    If the Graphviz ``dot`` program is installed, ``<visualize_dir>/<name>.png`` is
    rendered too; otherwise a warning on
    :data:`~machin.utils.logging.default_logger` says that rendering was skipped.
    Existing files of the same name are overwritten.

    Args:
        final_tensor: Tensor produced by differentiable operations (it has a ``grad_fn``).
        visualize_dir: Directory for the files (created if missing); the current
            directory when empty.
        exit_after_vis: Exit the program (``sys.exit(0)``) once the files are written.
        name: File name without extension.
        params: Optional names for leaf tensors, e.g. ``dict(model.named_parameters())``.

    Returns:
        The path of the DOT file (only when ``exit_after_vis`` is false).

    Raises:
        TypeError: When ``final_tensor`` is not a tensor.
        ValueError: When ``final_tensor`` has no ``grad_fn``.
        RuntimeError: When ``dot`` is installed but fails to render.
    """
    if not isinstance(final_tensor, torch.Tensor):
        raise TypeError(f"final_tensor must be a torch.Tensor, got {type(final_tensor).__name__}")
    if final_tensor.grad_fn is None:
        raise ValueError(
            "final_tensor has no grad_fn: it must be the result of differentiable operations on "
            "tensors that require gradients (not a leaf tensor, not computed under no_grad)"
        )
    directory = visualize_dir or "."
    os.makedirs(directory, exist_ok=True)
    dot_path = os.path.join(directory, f"{name}.dot")
    with open(dot_path, "w", encoding="utf-8") as file:
        file.write(_graph_dot(final_tensor, params))

    png_path = os.path.join(directory, f"{name}.png")
    dot_program = shutil.which("dot")
    if dot_program is None:
        default_logger.warning(
            f"wrote the autograd graph to {dot_path!r}; PNG rendering skipped because the Graphviz "
            f"'dot' program is not installed (render later with: dot -Tpng {dot_path} -o {png_path})"
        )
    else:
        result = subprocess.run(
            [dot_program, "-Tpng", dot_path, "-o", png_path],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if result.returncode != 0:
            raise RuntimeError(f"'dot' failed to render {dot_path!r}: {result.stderr.strip()}")
        default_logger.info(f"wrote the autograd graph to {dot_path!r} and {png_path!r}")

    if exit_after_vis:
        sys.exit(0)
    return dot_path
