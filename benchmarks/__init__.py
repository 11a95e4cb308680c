"""Throughput benchmarks: each module times a library operation against a bare-PyTorch floor.

Run them all with ``python -m benchmarks`` from the repository root, or one with
``python -m benchmarks.<module>``. Every module that defines ``main()`` is picked up.
"""
