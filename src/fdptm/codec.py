"""JSON round trip of the frozen dataclasses a run stores: calibrated mechanism parameters,
budget plans and guarantees.

A run calibrates its noise once (``fdptm.tasks.run.calibrate``) and stores the result in
the catalog; every stage, the manifest and a resumed run read it back instead of
calibrating again. ``encode`` tags each dataclass and enum with its class (and writes infinities as
text, which JSON has no number for); ``decode``
rebuilds them, and refuses classes outside this package and the registered mechanisms'
modules, so a catalog row can never make the pipeline import or construct anything else.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import math
from typing import Any

_TYPE = "__type__"
_ENUM = "__enum__"
_TUPLE = "__tuple__"
_FLOAT = "__float__"


def _qualified(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(name: str) -> type:
    module, _, qualname = name.partition(":")
    if module != "fdptm" and not module.startswith("fdptm.") and module not in _registered():
        raise ValueError(f"refusing to decode {name!r}: not an fdptm class")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _registered() -> set[str]:
    """Modules of the registered M2 mechanisms (asked only for a class outside fdptm)."""
    from fdptm.mechanisms.registry import MECHANISMS, TUNED

    return {m.implementation.params.__module__ for m in [*MECHANISMS.values(), *TUNED.values()]}


def encode(value: Any) -> Any:
    """``value`` as JSON-compatible data, dataclasses, enums and tuples tagged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {_TYPE: _qualified(type(value)), **fields}
    if isinstance(value, enum.Enum):
        return {_ENUM: _qualified(type(value)), "value": value.value}
    if isinstance(value, tuple):
        return {_TUPLE: [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, dict):
        return {str(k): encode(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT: repr(value)}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"cannot encode {type(value).__name__} in a run record")


def decode(data: Any) -> Any:
    """The inverse of ``encode``."""
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        return data
    if _TYPE in data:
        cls = _resolve(data[_TYPE])
        fields = {k: decode(v) for k, v in data.items() if k != _TYPE}
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        obj = cls(**{k: v for k, v in fields.items() if k in init})
        for k, v in fields.items():
            if k not in init:
                object.__setattr__(obj, k, v)
        return obj
    if _ENUM in data:
        return _resolve(data[_ENUM])(data["value"])
    if _FLOAT in data:
        return float(data[_FLOAT])
    if _TUPLE in data:
        return tuple(decode(v) for v in data[_TUPLE])
    return {k: decode(v) for k, v in data.items()}
