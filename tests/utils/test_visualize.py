import logging
import os
import re
import stat
from pathlib import Path

import pytest
import torch
from torch import nn

import machin.utils.visualize as visualize_module
from machin.utils.logging import default_logger
from machin.utils.visualize import visualize_graph

NODE = re.compile(r'^\s*(\w+) \[label="((?:[^"\\]|\\.)*)"', re.MULTILINE)
EDGE = re.compile(r"^\s*(\w+) -> (\w+);", re.MULTILINE)


def _loss():
    torch.manual_seed(0)
    net = nn.Linear(3, 2)
    loss = ((net(torch.ones(4, 3)) - 1.0) ** 2).mean()
    return net, loss


def _parse(path):
    with open(path) as file:
        text = file.read()
    labels = {node: label.replace("\\n", "\n") for node, label in NODE.findall(text)}
    edges = EDGE.findall(text)
    return text, labels, edges


@pytest.fixture
def no_dot(monkeypatch):
    monkeypatch.setattr(visualize_module.shutil, "which", lambda name: None)


@pytest.fixture
def log_records():
    records = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Collect()
    default_logger.addHandler(handler)
    yield records
    default_logger.removeHandler(handler)


def _reaches(edges, source, target):
    successors = {}
    for src, dst in edges:
        successors.setdefault(src, set()).add(dst)
    seen, stack = set(), [source]
    while stack:
        node = stack.pop()
        if node == target:
            return True
        if node not in seen:
            seen.add(node)
            stack.extend(successors.get(node, ()))
    return False


def test_writes_the_autograd_graph_as_dot(tmp_path, no_dot):
    net, loss = _loss()
    path = visualize_graph(
        loss, str(tmp_path / "vis"), exit_after_vis=False, params=dict(net.named_parameters())
    )
    assert path == str(tmp_path / "vis" / "graph.dot")
    text, labels, edges = _parse(path)
    assert text.startswith("digraph autograd {")
    assert text.rstrip().endswith("}")
    names = set(labels.values())
    # The loss ops; how torch decomposes the linear layer differs between versions.
    assert {"MeanBackward0", "PowBackward0", "SubBackward0"} <= names
    assert "weight\n[2, 3]" in names and "bias\n[2]" in names
    assert labels["out"] == "output\n[]"
    by_label = {label: node for node, label in labels.items()}
    assert (by_label["MeanBackward0"], "out") in edges
    assert (by_label["PowBackward0"], by_label["MeanBackward0"]) in edges
    for leaf in ("weight\n[2, 3]", "bias\n[2]"):
        assert _reaches(edges, by_label[leaf], by_label["SubBackward0"])
        assert not _reaches(edges, "out", by_label[leaf])
    assert all(src in labels and dst in labels for src, dst in edges)


def test_leaves_without_names_and_custom_file_name(tmp_path, no_dot):
    x = torch.ones(2, requires_grad=True)
    y = (x * x).sum()
    path = visualize_graph(y, str(tmp_path), exit_after_vis=False, name="square")
    assert path == str(tmp_path / "square.dot")
    _, labels, edges = _parse(path)
    assert sorted(labels.values()) == sorted(
        ["output\n[]", "SumBackward0", "MulBackward0", "leaf\n[2]"]
    )
    by_label = {label: node for node, label in labels.items()}
    assert edges.count((by_label["leaf\n[2]"], by_label["MulBackward0"])) == 2


def test_long_chains_and_shared_nodes_are_drawn_exactly_once(tmp_path, no_dot):
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(30):
        y = torch.sin(y)
    z = (y + y.exp()).sum()  # y feeds two operations
    path = visualize_graph(z, str(tmp_path), exit_after_vis=False, name="chain")
    _, labels, edges = _parse(path)
    names = list(labels.values())
    assert names.count("SinBackward0") == 30
    assert sorted(set(names) - {"SinBackward0"}) == sorted(
        ["output\n[]", "SumBackward0", "AddBackward0", "ExpBackward0", "leaf\n[3]"]
    )
    assert len(names) == 35
    by_label = {label: node for node, label in labels.items()}
    into_add = [src for src, dst in edges if dst == by_label["AddBackward0"]]
    assert len(into_add) == 2 and by_label["ExpBackward0"] in into_add
    assert sum(src == by_label["leaf\n[3]"] for src, _ in edges) == 1
    assert len(edges) == len(set(edges)) == 35


def test_logs_that_rendering_was_skipped_without_dot(tmp_path, no_dot, log_records):
    _, loss = _loss()
    visualize_graph(loss, str(tmp_path), exit_after_vis=False)
    [record] = [r for r in log_records if r.levelno == logging.WARNING]
    assert (
        "PNG rendering skipped because the Graphviz 'dot' program is not installed"
        in record.getMessage()
    )
    assert not (tmp_path / "graph.png").exists()


def _fake_dot(tmp_path, body):
    script = tmp_path / "dot"
    script.write_text("#!/bin/sh\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_renders_png_when_dot_is_installed(tmp_path, monkeypatch, log_records):
    # A stand-in for Graphviz: called as `dot -Tpng <dot file> -o <png file>`.
    fake = _fake_dot(tmp_path, 'test "$1" = "-Tpng" && cp "$2" "$4"\n')
    monkeypatch.setattr(
        visualize_module.shutil, "which", lambda name: fake if name == "dot" else None
    )
    _, loss = _loss()
    path = visualize_graph(loss, str(tmp_path / "out"), exit_after_vis=False)
    png = tmp_path / "out" / "graph.png"
    assert png.read_text() == Path(path).read_text()
    assert any("graph.png" in r.getMessage() for r in log_records if r.levelno == logging.INFO)


def test_failing_dot_raises(tmp_path, monkeypatch):
    fake = _fake_dot(tmp_path, 'echo "syntax error" >&2; exit 1\n')
    monkeypatch.setattr(visualize_module.shutil, "which", lambda name: fake)
    _, loss = _loss()
    with pytest.raises(RuntimeError, match="'dot' failed to render .*graph.dot': syntax error"):
        visualize_graph(loss, str(tmp_path), exit_after_vis=False)


def test_exits_after_writing_by_default(tmp_path, no_dot):
    _, loss = _loss()
    with pytest.raises(SystemExit) as exit_info:
        visualize_graph(loss, str(tmp_path))
    assert exit_info.value.code == 0
    assert os.path.getsize(tmp_path / "graph.dot") > 0


def test_current_directory_is_the_default(tmp_path, monkeypatch, no_dot):
    monkeypatch.chdir(tmp_path)
    _, loss = _loss()
    assert visualize_graph(loss, exit_after_vis=False) == os.path.join(".", "graph.dot")
    assert (tmp_path / "graph.dot").is_file()


def test_invalid_tensors_raise(tmp_path):
    with pytest.raises(TypeError, match="final_tensor must be a torch.Tensor, got float"):
        visualize_graph(1.0, str(tmp_path), exit_after_vis=False)
    with pytest.raises(ValueError, match="final_tensor has no grad_fn"):
        visualize_graph(torch.ones(2, requires_grad=True), str(tmp_path), exit_after_vis=False)
    with torch.no_grad():
        detached = nn.Linear(2, 1)(torch.ones(1, 2))
    with pytest.raises(ValueError, match="final_tensor has no grad_fn"):
        visualize_graph(detached, str(tmp_path), exit_after_vis=False)
