"""A small typed registry (lm-eval style) and the registry of acceptance rules.

``Registry[T]``: ``register(name)`` decorator (a name registered twice raises), ``get(name)``
(unknown names raise ``KeyError`` listing the allowed names and close matches), lazy
``"module:attr"`` placeholders so heavy backends (vLLM, EvalPlus) are imported only when used.
"""

from __future__ import annotations

import difflib
import importlib
from typing import Callable, Generic, Iterator, TypeVar

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A registry lookup for a name that is not registered."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0])


class Registry(Generic[T]):
    """Name -> object mapping with collision checks, suggestions and lazy entries.

    Args:
        kind: what the registry holds, used in error messages (e.g. ``"criterion"``) and equal
            to the config field that selects an entry (e.g. ``method.criterion``, ``backend.name``).
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T | str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name``. Raises ValueError on a duplicate name."""

        def deco(obj: T) -> T:
            if name in self._items and self._items[name] is not obj:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            return obj

        return deco

    def register_lazy(self, name: str, target: str) -> None:
        """Register ``"package.module:attr"``, imported on first ``get``."""
        if name in self._items:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._items[name] = target

    def get(self, name: str) -> T:
        """Return the entry for ``name``.

        Raises:
            UnknownNameError: ``name`` is not registered; the message names the field, the allowed
                values and close matches.
        """
        if name not in self._items:
            close = difflib.get_close_matches(str(name), list(self._items), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise UnknownNameError(
                f"{self.kind}={name!r} is unknown; allowed values: {', '.join(sorted(self._items))}{hint}"
            )
        item = self._items[name]
        if isinstance(item, str):
            module, _, attr = item.partition(":")
            item = getattr(importlib.import_module(module), attr)
            self._items[name] = item
        return item  # type: ignore[return-value]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())


CRITERIA: Registry = Registry("criterion")
