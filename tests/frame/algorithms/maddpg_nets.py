"""Old name of MADDPG's networks' module: the networks now live in ``nets.py``."""

from .nets import (
           ActorDiscrete,
           Critic,
           RecordingCritic,
           make_networks,
           parameters,
           random_step,
           same,
)
from .nets import SigmoidActor as Actor
from .nets import SigmoidActorWithExtra as ActorWithExtra

__all__ = ["Actor", "ActorDiscrete", "ActorWithExtra", "Critic", "RecordingCritic", "make_networks", "parameters",
           "random_step", "same"]
