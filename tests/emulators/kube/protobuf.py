"""Decode the few protobuf request bodies kubectl's typed clients send.

client-go's typed core client sends bodies as ``application/vnd.kubernetes.protobuf``: the
``DeleteOptions`` of a plain DELETE (``kubectl drain --disable-eviction``, or when the server
has no eviction subresource) and the Namespace of ``kubectl create namespace``. Answers stay
JSON, which clients accept. Only the listed fields are decoded; empty values are dropped.

Wire format: ``k8s\\x00`` then a ``runtime.Unknown`` {1: TypeMeta{1 apiVersion, 2 kind},
2: raw bytes of the typed message}.
"""
from __future__ import annotations

from typing import Any

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

# field number -> (json name, kind); kind: "str", "int", "bool", "strs" (repeated), "map",
# or a nested schema dict.
Schema = dict[int, tuple[str, Any]]
TYPE_META: Schema = {1: ("apiVersion", "str"), 2: ("kind", "str")}
UNKNOWN: Schema = {1: ("typeMeta", TYPE_META), 2: ("raw", "bytes")}
OBJECT_META: Schema = {1: ("name", "str"), 2: ("generateName", "str"), 3: ("namespace", "str"),
                       5: ("uid", "str"), 6: ("resourceVersion", "str"), 11: ("labels", "map"),
                       12: ("annotations", "map"), 14: ("finalizers", "strs")}
PRECONDITIONS: Schema = {1: ("uid", "str"), 2: ("resourceVersion", "str")}
DELETE_OPTIONS: Schema = {1: ("gracePeriodSeconds", "int"), 2: ("preconditions", PRECONDITIONS),
                          3: ("orphanDependents", "bool"), 4: ("propagationPolicy", "str"), 5: ("dryRun", "strs")}
NAMESPACE: Schema = {1: ("metadata", OBJECT_META)}
SCHEMAS: dict[str, Schema] = {"DeleteOptions": DELETE_OPTIONS, "Namespace": NAMESPACE}


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    out: list[tuple[int, int | bytes]] = []
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            out.append((number, value))
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ValueError("truncated field")
            out.append((number, data[pos:pos + length]))
            pos += length
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4  # fixed-width fields: none of ours, skip
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def decode_message(data: bytes, schema: Schema) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, value in _fields(data):
        if number not in schema:
            continue
        name, kind = schema[number]
        if isinstance(kind, dict):
            nested = decode_message(bytes(value), kind) if isinstance(value, bytes) else {}
            if nested:
                out[name] = nested
        elif kind == "map" and isinstance(value, bytes):
            entry = {n: v.decode() for n, v in _fields(value) if isinstance(v, bytes)}
            out.setdefault(name, {})[entry.get(1, "")] = entry.get(2, "")
        elif kind == "strs" and isinstance(value, bytes):
            out.setdefault(name, []).append(value.decode())
        elif kind == "str" and isinstance(value, bytes) and value:
            out[name] = value.decode()
        elif kind == "bytes" and isinstance(value, bytes):
            out[name] = value
        elif kind == "int" and isinstance(value, int):
            out[name] = value - (1 << 64) if value >= 1 << 63 else value
        elif kind == "bool" and isinstance(value, int):
            out[name] = bool(value)
    return out


def decode(body: bytes) -> dict[str, Any]:
    """A Kubernetes protobuf body as the equivalent JSON object; ValueError if unsupported."""
    if not body.startswith(MAGIC):
        raise ValueError("missing the k8s protobuf magic prefix")
    unknown = decode_message(body[len(MAGIC):], UNKNOWN)
    meta = unknown.get("typeMeta", {})
    schema = SCHEMAS.get(meta.get("kind", ""))
    if schema is None:
        raise ValueError(f"protobuf bodies of kind {meta.get('kind')!r} are not supported by the emulator")
    return {**meta, **decode_message(unknown.get("raw", b""), schema)}
