"""The ``idna`` codec for ASCII host names without ``encodings.idna`` (stringprep, unicodedata).

``socket.getaddrinfo`` encodes a host given as str with the ``idna`` codec, always, even an IP
literal (Modules/socketmodule.c), so the metadata poll's first connection (http.client)
imports ``encodings.idna``, which imports ``stringprep`` and ``unicodedata`` and compiles a
regular expression: +0.62 MiB in a forked watcher (docs/footprint.md). For an ASCII name the
real codec takes a fast path (Lib/encodings/idna.py, ``Codec.encode``): the ASCII bytes
themselves, once no label but the last is empty and none is 64 bytes or longer. ``install``
registers a codec doing exactly that, and asking the real module for everything else (a
non-ASCII name, a bad label, another error handler, decoding, the incremental and stream
codecs): tests/watcher/test_lean_asyncio.py compares the two. The stand-in module leaves
``sys.modules`` once the codec is registered, so ``import encodings.idna`` stays the real module.
"""
from __future__ import annotations

import codecs
import sys
import types
from typing import Any

from common.proven import why_not
from watcher.stand_in import real_module


def _real() -> codecs.CodecInfo:
    info: codecs.CodecInfo = real_module("encodings.idna").getregentry()
    return info


def encode(text: str, errors: str = "strict") -> tuple[bytes, int]:
    """What the real codec returns, computed here for an ASCII name it accepts; else the real codec."""
    if errors == "strict" and text.isascii():
        result = text.encode("ascii")
        labels = result.split(b".")
        if all(0 < len(label) < 64 for label in labels[:-1]) and len(labels[-1]) < 64:
            return result, len(text)
    return _real().encode(text, errors)


def _decode(data: Any, errors: str = "strict") -> tuple[str, int]:
    return _real().decode(data, errors)


def _made_by_real(attr: str) -> Any:
    def make(*args: Any, **kwargs: Any) -> Any:
        return getattr(_real(), attr)(*args, **kwargs)
    return make


def codec_info() -> codecs.CodecInfo:
    return codecs.CodecInfo(
        name="idna", encode=encode, decode=_decode,
        incrementalencoder=_made_by_real("incrementalencoder"),
        incrementaldecoder=_made_by_real("incrementaldecoder"),
        streamwriter=_made_by_real("streamwriter"), streamreader=_made_by_real("streamreader"))


def install() -> None:
    """Register this codec as ``idna``, unless the real one is loaded (then it is the codec) or this
    CPython series was not tested (common/proven.py: the real codec's fast path may differ there)."""
    if "encodings.idna" in sys.modules or why_not("watcher.idna_codec"):
        return
    # A plain module, not a Deferred: encodings.search_function's import reads ``__path__`` and
    # ``__all__`` of it, which would import the real one. Nobody but that lookup sees it.
    stand_in = types.ModuleType("encodings.idna", "stand-in (watcher.idna_codec) while the codec is registered")
    stand_in.getregentry = codec_info  # type: ignore[attr-defined]  # a plain module built here
    stand_in.getaliases = tuple  # type: ignore[attr-defined]  # the real module has no aliases either
    sys.modules["encodings.idna"] = stand_in
    try:
        codecs.lookup("idna")   # encodings.search_function imports it from sys.modules; cached from now on
    finally:
        if sys.modules.get("encodings.idna") is stand_in:
            del sys.modules["encodings.idna"]
