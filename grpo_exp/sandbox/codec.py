"""Plain data crossing the sandbox boundary, as the trusted parent writes and reads it.

Each value is a list ``[tag, payload...]`` (``child`` holds the other half):
``n`` None, ``b`` bool, ``i`` int (hex text, so any size), ``f`` float (repr, so nan/inf too),
``s`` str (UTF-8 as hex from the child, plain from the parent), ``y`` bytes (hex), ``c``
complex, ``l``/``t``/``S``/``F`` list/tuple/set/frozenset, ``d`` dict (list of key/value
pairs), ``r`` an opaque handle to an object kept in the child, ``g`` a global name of the
candidate's program (parent to child only). Parent to child the lists travel in marshal frames,
child to parent in JSON.

Decoding is strict and builds only exact builtin types, so nothing the child sends can carry
behaviour (an ``__eq__`` that is always true, say) into the parent. Its cost is linear in the
message: a set or dict whose keys share one hash value (ints that are multiples of 2**61 - 1, say;
str and bytes hashes are salted, int, float and tuple hashes are not) would take quadratic time to
build in C, holding the GIL, so more than ``MAX_SAME_HASH`` such keys are refused instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

MAX_DEPTH = 100  # deeper values are refused on both sides
MAX_SAME_HASH = 32  # distinct keys of one set/dict sharing a hash; honest data never gets close

_SEQUENCES: dict[str, type] = {"l": list, "t": tuple, "S": set, "F": frozenset}
_HASHED = frozenset({"S", "F"})
_SEQUENCE_TAGS: dict[type, str] = {kind: tag for tag, kind in _SEQUENCES.items()}
_SCALARS = (bool, int, float, str, bytes, complex)


class CodecError(ValueError):
    """A value that is not plain data, or a malformed message."""


def encode(value: Any, target_of: Callable[[Any], list | None], depth: int = 0) -> list:
    """``value`` as tagged plain data; ``target_of`` maps a sandbox handle to its target."""
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["b", value]
    if kind is int:
        return ["i", format(value, "x")]
    if kind is float:
        return ["f", repr(value)]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["y", value.hex()]
    if kind is complex:
        return ["c", repr(value.real), repr(value.imag)]
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if kind in _SEQUENCE_TAGS:
        return [_SEQUENCE_TAGS[kind], [encode(v, target_of, depth + 1) for v in value]]
    if kind is dict:
        return ["d", [[encode(k, target_of, depth + 1), encode(v, target_of, depth + 1)] for k, v in value.items()]]
    target = target_of(value)
    if target is None:
        raise CodecError(f"cannot send a {kind.__name__} into the sandbox: only plain data crosses")
    return target


def decode(obj: Any, make_ref: Callable[[int], Any], depth: int = 0) -> Any:
    """The value ``obj`` describes; ``make_ref`` turns a handle id into a parent-side proxy."""
    if depth > MAX_DEPTH:
        raise CodecError("value nested too deeply")
    if type(obj) is not list or not obj or type(obj[0]) is not str:
        raise CodecError(f"malformed value {obj!r:.80}")
    tag, args = obj[0], obj[1:]
    try:
        if tag == "n" and not args:
            return None
        if tag == "b" and type(args[0]) is bool:
            return args[0]
        if tag == "s" and type(args[0]) is str:
            return unhex(args[0])
        if tag == "i" and type(args[0]) is str:
            return int(args[0], 16)
        if tag == "f" and type(args[0]) is str:
            return float(args[0])
        if tag == "y" and type(args[0]) is str:
            return bytes.fromhex(args[0])
        if tag == "c" and all(type(a) is str for a in args[:2]):
            return complex(float(args[0]), float(args[1]))
        if tag in _SEQUENCES and type(args[0]) is list:
            items = [decode(v, make_ref, depth + 1) for v in args[0]]
            if tag in _HASHED:
                _refuse_hash_floods(items)
            return _SEQUENCES[tag](items)
        if tag == "d" and type(args[0]) is list:
            keys = [_pair_key(p, make_ref, depth) for p in args[0]]
            _refuse_hash_floods(keys)
            return dict(zip(keys, [decode(p[1], make_ref, depth + 1) for p in args[0]], strict=True))
        if tag == "r" and type(args[0]) is int:
            return make_ref(args[0])
    except (IndexError, TypeError, ValueError, OverflowError, UnicodeDecodeError) as exc:
        raise CodecError(f"malformed {tag!r} value: {exc}") from None
    raise CodecError(f"malformed value {obj!r:.80}")


def unhex(text: str) -> str:
    """Text the child sent as hex UTF-8 (lone surrogates allowed, as Python strings allow them)."""
    return bytes.fromhex(text).decode("utf-8", "surrogatepass")


def _refuse_hash_floods(keys: list[Any]) -> None:
    """Raise CodecError when too many keys share a hash (their set would build in quadratic time)."""
    counts: dict[int, int] = {}
    for key in keys:
        h = hash(key)  # TypeError for an unhashable key, as the set itself would raise
        counts[h] = seen = counts.get(h, 0) + 1
        if seen > MAX_SAME_HASH:
            raise CodecError(f"more than {MAX_SAME_HASH} keys of one set or dict share a hash value")


def _pair_key(pair: Any, make_ref: Callable[[int], Any], depth: int) -> Any:
    if type(pair) is not list or len(pair) != 2:
        raise CodecError("malformed dict item")
    return decode(pair[0], make_ref, depth + 1)


def is_plain(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is built only from exact builtin plain types."""
    kind = type(value)
    if value is None or kind in _SCALARS:
        return True
    if depth > MAX_DEPTH:
        return False
    if kind in _SEQUENCE_TAGS:
        return all(is_plain(v, depth + 1) for v in value)
    if kind is dict:
        return all(is_plain(k, depth + 1) and is_plain(v, depth + 1) for k, v in value.items())
    return False
