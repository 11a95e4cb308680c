"""Old name of the stochastic policies' module: the networks now live in ``nets.py``."""

from .nets import (
           CategoricalActor,
           ColumnCategoricalActor,
           QCritic,
           TanhGaussianActor,
           ValueCritic,
           mlp,
           step_dict,
)

__all__ = ["CategoricalActor", "ColumnCategoricalActor", "QCritic", "TanhGaussianActor", "ValueCritic", "mlp",
           "step_dict"]
