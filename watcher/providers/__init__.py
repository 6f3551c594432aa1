"""Instance-metadata notice sources: one module per provider behind one small interface.

A source's ``poll(now)`` asks the metadata service once and returns what it
sees *now* (level-triggered): the notices currently announced and the ids it
has seen withdrawn. It raises ``MetadataError`` when the service gave no usable
answer. The watcher owns the loop, the interval and the de-duplication, so a
new provider is one new module registered in ``SOURCES``.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol

from common.config import Config
from common.notice import Notice


class MetadataError(Exception):
    """The metadata service gave no usable answer. ``reason`` is a bounded label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(slots=True)
class PollResult:
    notices: list[Notice] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)


class MetadataSource(Protocol):
    name: str

    def poll(self, now: float) -> PollResult: ...


SOURCES = {"aws": "watcher.providers.aws"}


def make_source(config: Config) -> MetadataSource | None:
    """The configured provider's source, or None when metadata polling is off."""
    provider = config.metadata.provider
    if provider == "none":
        return None
    module = SOURCES.get(provider)
    if module is None:
        raise ValueError(f"metadata provider {provider!r} is not implemented")
    return importlib.import_module(module).Source(config)
