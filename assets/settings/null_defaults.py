"""Config fields that show as unset in the Dagster launchpad but hold their built-in value.

The launchpad opens with every field that has a default written out, sorted by name: eight
stages' ``force: false``, the download retry settings, and only then, at line 49, the profile
that most runs change. A field declared with :func:`null_default` has the schema default null
(so the launchpad leaves it out, and its description says what null means), while the code
always reads the built-in value: :class:`NullMeansDefault` fills it in when the run leaves it
unset.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

_KEY = "null_means"


def null_default(value: Any, description: str) -> Any:
    """A field shown unset (null) whose unset value is ``value``."""
    return Field(
        default=None, description=f"{description} Null: {value!r}.", json_schema_extra={_KEY: value}
    )


class NullMeansDefault:
    """Mixed into a ``Config`` or ``ConfigurableResource``: fields of :func:`null_default` left
    unset (or set to null) take their built-in value."""

    @model_validator(mode="before")
    @classmethod
    def _fill_null_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        filled = dict(data)
        for name, field in cls.model_fields.items():  # type: ignore[attr-defined]
            extra = field.json_schema_extra
            if isinstance(extra, dict) and _KEY in extra and filled.get(name) is None:
                filled[name] = extra[_KEY]
        return filled
