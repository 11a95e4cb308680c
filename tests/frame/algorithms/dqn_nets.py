"""Old name of the value networks' module: the networks now live in ``nets.py``."""

from .nets import DistQNet, DuelingQNet, QNet, QNetWithHidden, SummingLoss, transition

__all__ = ["DistQNet", "DuelingQNet", "QNet", "QNetWithHidden", "SummingLoss", "transition"]
