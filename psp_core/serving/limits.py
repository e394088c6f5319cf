"""What one request to ``psp serve`` may ask for: its memory stays bounded whatever it sends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    #: inputs in one request (OpenAI's own limit)
    max_inputs: int = 2048
    #: characters of one input (a model reads its first max_length pieces anyway)
    max_input_chars: int = 65_536
    #: bytes of one request body
    max_body_bytes: int = 16 << 20
