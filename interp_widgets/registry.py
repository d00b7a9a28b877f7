"""One registry mechanism for everything that is looked up by name: attribution methods and concept models.

A base class owns a :class:`Registry` and calls :meth:`Registry.add_subclass` from its ``__init_subclass__``; every
subclass that sets the registry's name attribute (``name``) in its own class body registers itself under that name,
and abstract bases, which set none, stay out. Lookups by an unknown name raise :class:`UnknownNameError`, which lists
the names that exist. A registry is a read-only, live :class:`~collections.abc.Mapping` (``name -> class``), so
``METHODS`` and ``CONCEPT_MODELS`` can be read like the plain dicts they used to be.

This module imports nothing else from the package, so every part of it can depend on it.

Example:
    >>> class Shape:
    ...     registry = Registry("shape")
    ...     name = ""
    ...     def __init_subclass__(cls, **kwargs):
    ...         super().__init_subclass__(**kwargs)
    ...         Shape.registry.add_subclass(cls)
    >>> class Square(Shape):
    ...     name = "square"
    >>> Shape.registry["square"] is Square, list(Shape.registry)
    (True, ['square'])
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping


class UnknownNameError(KeyError, ValueError):
    """A name that no registered class has; the message lists the available names.

    A ``KeyError`` (so ``name in registry`` and ``registry.get(name)`` behave like a dict) and a ``ValueError``
    (an invalid argument value, as the lookups raised before there was a registry).

    Example:
        >>> try:
        ...     Registry("method")["nope"]
        ... except UnknownNameError as err:
        ...     print(err)
        unknown method 'nope'; available: (none registered)
    """

    def __str__(self) -> str:
        return str(self.args[0])


class Registry(Mapping):
    """A read-only, live mapping ``name -> class`` that classes add themselves to.

    Args:
        kind: what the registered classes are (``"method"``, ``"concept model"``), used in error messages.
        attribute: the class attribute that holds a class's registered name.

    Example:
        >>> registry = Registry("widget")
        >>> class Dial:
        ...     name = "dial"
        >>> registry.add_subclass(Dial) is Dial, "dial" in registry, len(registry)
        (True, True, 1)
    """

    def __init__(self, kind: str, *, attribute: str = "name"):
        self.kind = kind
        self.attribute = attribute
        self._classes: dict[str, type] = {}

    def add_subclass(self, cls: type) -> type:
        """Register ``cls`` under its name if it sets one in its own class body (abstract bases do not); returns it.

        Redefining a class (same module and qualified name, as when a notebook cell runs again) replaces the old
        one; a different class with a name that is taken raises a ``ValueError``.

        Example:
            >>> registry = Registry("widget")
            >>> class Base:
            ...     name = ""
            >>> registry.add_subclass(Base) and len(registry)
            0
        """
        name = cls.__dict__.get(self.attribute)
        if not isinstance(name, str) or not name:
            return cls
        existing = self._classes.get(name)
        if existing is not None and _qualified(existing) != _qualified(cls):
            raise ValueError(
                f"{self.kind} name {name!r} is already taken by {_qualified(existing)}; give "
                f"{_qualified(cls)} another {self.attribute}"
            )
        self._classes[name] = cls
        return cls

    def remove(self, name: str) -> type:
        """Unregister the class registered as ``name`` (for example a method defined in a test) and return it.

        Example:
            >>> registry = Registry("widget")
            >>> class Dial:
            ...     name = "dial"
            >>> registry.add_subclass(Dial) is registry.remove("dial"), len(registry)
            (True, 0)
        """
        cls = self[name]
        del self._classes[name]
        return cls

    def __getitem__(self, name: str) -> type:
        try:
            return self._classes[name]
        except (KeyError, TypeError):
            available = ", ".join(sorted(self._classes)) or "(none registered)"
            raise UnknownNameError(f"unknown {self.kind} {name!r}; available: {available}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._classes)

    def __len__(self) -> int:
        return len(self._classes)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._classes) or 'empty'})"


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
