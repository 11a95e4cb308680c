"""Helpers for working with environments (gymnasium and old gym-style ones)."""

from . import openai_gym
from .openai_gym import GymLegacyAdapter, disable_view_window, ensure_gymnasium_env

__all__ = ["openai_gym", "GymLegacyAdapter", "disable_view_window", "ensure_gymnasium_env"]
