"""What a bundle's ``config.json`` holds (:class:`BundleConfig`), the bundle's file names, and
the error every bundle check raises. Kept apart from the reading and writing of bundles
(:mod:`psp_core.models.bundle`) so that the model card can describe a configuration without
importing them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from psp_core.tokenization.tokenizer import PRETOKENIZERS

BUNDLE_FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
SPM_FILE = "sentencepiece.model"
EMBEDDINGS_FILE = "embeddings.safetensors"
EMBEDDINGS_KEY = "embeddings"
#: the checksum of each file: xxh3_128, fast enough that verifying on every load is cheap
#: (benchmarks/RESULTS.md#bundle-verify)
CHECKSUM = "xxh3_128"


class BundleError(ValueError):
    """A model bundle is missing, incomplete or inconsistent."""


@dataclass
class BundleConfig:
    """What ``config.json`` holds."""

    dim: int
    vocab_size: int
    spm_sha256: str
    lowercase: bool = True
    pretokenizer: str = "none"
    max_length: int = 100
    languages: list[str] = field(default_factory=list)
    training: dict[str, Any] = field(default_factory=dict)
    format_version: int = BUNDLE_FORMAT_VERSION
    #: ``{file name: {"bytes": size, "xxh3_128": hex}}``, written by :func:`save_bundle` (what
    #: is given here is ignored); empty in bundles saved before checksums were recorded.
    files: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: Path) -> BundleConfig:
        required = ("dim", "vocab_size", "spm_sha256", "format_version")
        missing = [key for key in required if key not in data]
        if missing:
            raise BundleError(f"{source}: missing keys {missing}")
        if data["format_version"] != BUNDLE_FORMAT_VERSION:
            raise BundleError(
                f"{source}: format_version {data['format_version']}, "
                f"this psp_core reads {BUNDLE_FORMAT_VERSION}"
            )
        known = {f for f in cls.__dataclass_fields__}
        config = cls(**{key: value for key, value in data.items() if key in known})
        config.validate(source)
        return config

    def validate(self, source: Path | str) -> None:
        """Check every value's type and range; raise :class:`BundleError` naming ``source``."""

        def fail(key: str, expected: str) -> None:
            raise BundleError(f"{source}: {key} must be {expected}, got {getattr(self, key)!r}")

        for key in ("dim", "vocab_size", "max_length", "format_version"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int):
                fail(key, "an integer")
        if self.dim < 1 or self.vocab_size < 1:
            fail("dim" if self.dim < 1 else "vocab_size", "a positive integer")
        if self.max_length < 0:
            fail("max_length", "0 (no limit) or a positive integer")
        if not isinstance(self.lowercase, bool):
            fail("lowercase", "true or false")
        if not isinstance(self.spm_sha256, str):
            fail("spm_sha256", "a string")
        if self.pretokenizer not in PRETOKENIZERS:
            fail("pretokenizer", f"one of {list(PRETOKENIZERS)}")
        if not isinstance(self.languages, list) or not all(
            isinstance(x, str) for x in self.languages
        ):
            fail("languages", "a list of language codes")
        if not isinstance(self.training, dict):
            fail("training", "an object")
        if not isinstance(self.files, dict) or not all(
            is_file_record(name, record) for name, record in self.files.items()
        ):
            fail("files", f'{{file name: {{"bytes": size, "{CHECKSUM}": hex digest}}}}')
        for name in (SPM_FILE, EMBEDDINGS_FILE) if self.files else ():
            if name not in self.files:
                raise BundleError(f"{source}: files has no entry for {name}")


def is_file_record(name: Any, record: Any) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and Path(name).name == name
        and isinstance(record, dict)
        and isinstance(record.get("bytes"), int)
        and not isinstance(record["bytes"], bool)
        and isinstance(record.get(CHECKSUM), str)
    )
