"""The abstract interface shared by every parallel environment wrapper."""

from abc import ABC, abstractmethod
from typing import Any, List, Union

from ...utils.compat import ignores_extra_args

__all__ = ["ParallelWrapperBase"]


class ParallelWrapperBase(ABC):
    """Run several environments of one kind as a group.

    The environments may be built with different parameters, but they must share the
    same action space and observation space. Each one is addressed by its index
    ``0 .. size() - 1``; methods that take ``idx`` act on every environment when it is
    ``None``, on one environment when it is an ``int``, and on the listed environments
    (in that order) when it is a list.

    Subclasses implement every abstract method and property below; instantiating this
    class itself raises :class:`TypeError`.
    """

    @ignores_extra_args
    def __init__(self) -> None:
        # Arguments meant for a subclass are accepted and ignored (with a warning).
        super().__init__()

    @abstractmethod
    def reset(self, idx: Union[int, List[int], None] = None) -> Any:
        """Reset all environments, or the selected ones.

        Args:
            idx: Index or indexes of the environments to reset; ``None`` means all.

        Returns:
            The initial observations; the format is decided by the subclass.
        """

    @abstractmethod
    def step(self, action: Any, idx: Union[int, List[int], None] = None) -> Any:
        """Advance the selected environments by one time step.

        The selected environments must be active: reset, and not terminal since.

        Args:
            action: The actions, one per selected environment.
            idx: Index or indexes of the environments to step; ``None`` means all.

        Returns:
            The new states of the environments; the format is decided by the subclass.
        """

    @abstractmethod
    def seed(self, seed: Union[int, List[int], None] = None) -> List[int]:
        """Set the random seed of every environment.

        Args:
            seed: One ``int`` for all environments, a list with one ``int`` per
                environment, or ``None`` for a default choice.

        Returns:
            The seed each environment will use.
        """

    @abstractmethod
    def render(self, *args: Any, **kwargs: Any) -> Any:
        """Render the environments.

        Returns:
            The rendered output; the format is decided by the subclass.
        """

    @abstractmethod
    def close(self) -> Any:
        """Close all environments and release what the wrapper holds."""

    @abstractmethod
    def active(self) -> List[int]:
        """Return the indexes of the active environments (reset and not terminal)."""

    @abstractmethod
    def size(self) -> int:
        """Return the number of wrapped environments."""

    @property
    @abstractmethod
    def action_space(self) -> Any:
        """The action space shared by all environments."""

    @property
    @abstractmethod
    def observation_space(self) -> Any:
        """The observation space shared by all environments."""
