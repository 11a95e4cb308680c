import re
from pathlib import Path

from setuptools import find_packages, setup

root = Path(__file__).parent
version = re.search(
    r'__version__ = "([^"]+)"', (root / "machin" / "__init__.py").read_text()
).group(1)

setup(
    name="machin",
    version=version,
    description="Reinforcement learning library for PyTorch: algorithms, buffers, parallel tools",
    long_description=(root / "README.md").read_text(),
    long_description_content_type="text/markdown",
    license="MIT",
    packages=find_packages(include=["machin", "machin.*"]),
    python_requires=">=3.9",
    # The supported ranges. requirements.txt is the one set CI installs and tests in full;
    # `.ci/run --lowest` runs the unit tests against the lower bounds below. torch is the
    # exception: the only build installable on the CI machine is 2.13.0 (CPU), so torch's lower
    # bound is untested: 2.1 is the oldest release machin's code is written against.
    # No upper bounds: no release of these is known to break machin. When one does, cap it here
    # with a comment naming the break.
    install_requires=[
        "torch>=2.1",
        "numpy>=1.26",  # numpy 2 is supported as well; 1.26 is the first with Python 3.12 wheels
        "gymnasium>=1.1",  # 1.1 added the vector envs' autoreset modes that machin.frame.sampler reads
        "dill>=0.3.8",
        "tensorboardX>=2.6",
        "moviepy>=2.0",  # 2.0 renamed the import path (`from moviepy import ...`)
        "pillow>=10.0",
        "matplotlib>=3.8",
        "psutil>=5.9",
        "tqdm>=4.66",
    ],
    extras_require={
        # what the bundled examples and tests use beyond the library itself
        "examples": [
            "gymnasium[classic-control,box2d]>=1.1",
            "mpe2>=1.1",
            "pettingzoo>=1.24",
            "ale-py>=0.9",
        ],
        "test": ["pytest>=8.0", "pytest-timeout>=2.3", "pytest-xdist>=3.5"],
        # the Ray transport of machin.parallel.distributed (World(transport="ray"), launch_ray)
        "ray": ["ray>=2.40"],
        # the hyperparameter search of the launcher (python -m machin.auto tune)
        "tune": ["optuna>=3.0"],
        # exporting policies to ONNX (python -m machin.auto export --format onnx) and running them
        "export": ["onnx>=1.17", "onnxscript>=0.6", "onnxruntime>=1.20"],
        # the Trainer's experiment trackers (machin.frame.trackers); MLflow's local store is an
        # SQLite file, which needs sqlalchemy and alembic besides mlflow-skinny
        "mlflow": ["mlflow-skinny>=3.0", "sqlalchemy>=2.0", "alembic>=1.10"],
        # wandb.init(reinit="create_new") needs 0.19.10
        "wandb": ["wandb>=0.19.10"],
        "offline": ["minari[hdf5]>=0.5"],  # Minari datasets (machin.frame.offline.load_minari)
        # building the documentation in docs/
        "docs": ["sphinx>=8.0", "furo>=2024.8"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
