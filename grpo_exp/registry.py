"""A name -> object registry filled by decorators: how rewards, dataset loaders and model sources
are found from config values, with a one-line error listing the known names for a wrong one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from grpo_exp.errors import UserError

T = TypeVar("T")


class Registry(Generic[T]):
    """Things registered under names; ``what`` names them in errors (e.g. "dataset.source")."""

    def __init__(self, what: str, hint: str = "") -> None:
        self.what = what
        self.hint = hint
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator adding an object under ``name``; a second one with the same name is a bug."""

        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.what} {name!r} is registered twice")
            self._items[name] = item
            return item

        return add

    def get(self, name: str) -> T:
        """The object called ``name``, or a UserError listing the known names."""
        if name not in self._items:
            raise UserError(f"unknown {self.what} {name!r}; known: {', '.join(self.names())}{self.hint}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items
