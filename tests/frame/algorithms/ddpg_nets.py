"""Old name of the DDPG family's networks' module: the networks now live in ``nets.py``."""

from .nets import (
    ACTION_DIM,
    ACTION_RANGE,
    STATE_DIM,
    Actor,
    ActorDiscrete,
    ActorWithExtra,
    Critic,
    LinearActor,
    LinearCritic,
    fill,
    parameters,
    pendulum_nets,
    random_transition,
    same,
)

__all__ = ["ACTION_DIM", "ACTION_RANGE", "STATE_DIM", "Actor", "ActorDiscrete", "ActorWithExtra", "Critic",
           "LinearActor", "LinearCritic", "fill", "parameters", "pendulum_nets", "random_transition", "same"]
