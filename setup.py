import re
from pathlib import Path

from setuptools import find_packages, setup

root = Path(__file__).parent
version = re.search(r'__version__ = "([^"]+)"', (root / "machin" / "__init__.py").read_text()).group(1)

setup(
    name="machin",
    version=version,
    description="Reinforcement learning library for PyTorch: algorithms, buffers, parallel tools",
    long_description=(root / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="MIT",
    packages=find_packages(include=["machin", "machin.*"]),
    python_requires=">=3.9",
    install_requires=[
        "torch>=2.1",
        "numpy>=1.26",
        "gymnasium>=1.0",
        "dill>=0.3.8",
        "tensorboardX>=2.6",
        "moviepy>=2.0",
        "pillow>=10.0",
        "matplotlib>=3.8",
        "psutil>=5.9",
        "tqdm>=4.66",
    ],
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: MIT License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
