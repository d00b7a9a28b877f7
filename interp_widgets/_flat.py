"""Results made of parts and read through flat names: one table per result class maps each flat name (the names of a
result's 0.1 fields and of its saved files) to ``(part, attribute)``, where the attribute may be a dotted path into
the part (``"foils.labels"``). This module turns such a table into read-only properties, groups flat values by part
(for a class's ``from_flat``), and makes copies with flat or part changes (``replace``).

Core module, no torch: attribution, lens, concept and geometry results all use it.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Run:
    ...     name: str
    ...     seed: int = 0
    >>> @dataclass
    ... class Result:
    ...     run: Run
    >>> TABLE = {"method": ("run", "name"), "seed": ("run", "seed")}
    >>> _ = install_flat_properties(Result, TABLE)
    >>> r = Result(Run("ig"))
    >>> r.method, replace_flat(r, TABLE, {"seed": 3}, what="result").seed, r.seed
    ('ig', 3, 0)
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FlatTable", "group_flat", "install_flat_properties", "read_flat", "replace_flat"]

#: flat name -> (part, attribute path inside the part, dotted)
FlatTable = dict[str, tuple[str, str]]


def read_flat(obj: Any, part: str, attribute: str) -> Any:
    """``obj.<part>.<attribute>`` where ``attribute`` may be dotted; None when the part (or a step) is None.

    Example:
        >>> from types import SimpleNamespace as NS
        >>> read_flat(NS(contrast=NS(foils=NS(labels=["a"]))), "contrast", "foils.labels"), read_flat(NS(contrast=None), "contrast", "text")
        (['a'], None)
    """  # fmt: skip
    value = getattr(obj, part)
    for step in attribute.split("."):
        if value is None:
            return None
        value = getattr(value, step)
    return value


def install_flat_properties(cls: type, table: FlatTable) -> type:
    """Give ``cls`` one read-only property per flat name of ``table``; returns ``cls``.

    Example:
        >>> class Box:
        ...     inner = type("Inner", (), {"x": 1})()
        >>> install_flat_properties(Box, {"x": ("inner", "x")})().x
        1
    """
    for name, (part, attribute) in table.items():

        def read(self, part=part, attribute=attribute):
            return read_flat(self, part, attribute)

        read.__doc__ = f"``{part}.{attribute}`` (read-only)."
        read.__name__ = name
        setattr(cls, name, property(read))
    return cls


def group_flat(table: FlatTable, values: dict[str, Any], *, what: str, extra=()) -> dict[str, dict[str, Any]]:
    """Flat ``values`` grouped by part, ``{part: {attribute path: value}}``; names neither in ``table`` nor in
    ``extra`` are a TypeError that names the known ones.

    Example:
        >>> group_flat({"method": ("run", "name")}, {"method": "ig"}, what="result")
        {'run': {'name': 'ig'}}
        >>> group_flat({"method": ("run", "name")}, {"methd": "ig"}, what="result")
        Traceback (most recent call last):
        ...
        TypeError: unknown result values ['methd']; known: ['method']
    """
    unknown = sorted(set(values) - set(table) - set(extra))
    if unknown:
        raise TypeError(f"unknown {what} values {unknown}; known: {sorted({*table, *extra})}")
    grouped: dict[str, dict[str, Any]] = {}
    for name, (part, attribute) in table.items():
        if name in values:
            grouped.setdefault(part, {})[attribute] = values[name]
    return grouped


def _replace_paths(obj: Any, changes: dict[str, Any], where: str) -> Any:
    """A copy of the dataclass ``obj`` with ``changes`` by dotted attribute path, each nested part rebuilt once."""
    if obj is None:
        raise TypeError(f"this result has no {where}; pass {where}= with the whole part")
    direct = {path: value for path, value in changes.items() if "." not in path}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in changes.items():
        if "." in path:
            head, rest = path.split(".", 1)
            nested.setdefault(head, {})[rest] = value
    for head, sub in nested.items():
        direct[head] = _replace_paths(getattr(obj, head), sub, f"{where}.{head}")
    return dataclasses.replace(obj, **direct)


def replace_flat(obj: Any, table: FlatTable, changes: dict[str, Any], *, what: str) -> Any:
    """A copy of the result ``obj`` with ``changes`` given by part (its own fields) or by flat name; each changed
    part is rebuilt once (so its checks see all its changes together) and the others are shared.

    Example:
        >>> from dataclasses import dataclass
        >>> @dataclass
        ... class Run:
        ...     name: str
        >>> @dataclass
        ... class Result:
        ...     run: Run
        >>> replace_flat(Result(Run("ig")), {"method": ("run", "name")}, {"method": "saliency"}, what="result")
        Result(run=Run(name='saliency'))
    """
    own = {f.name for f in dataclasses.fields(obj)}
    parts = {name: value for name, value in changes.items() if name in own}
    grouped = group_flat(table, {k: v for k, v in changes.items() if k not in own}, what=what, extra=sorted(own))
    for part, values in grouped.items():
        if part in parts:
            raise TypeError(f"pass {part}= or its values by name ({sorted(values)}), not both")
        parts[part] = _replace_paths(getattr(obj, part), values, part)
    return dataclasses.replace(obj, **parts)
