"""Models on the Hugging Face Hub: ``hf://ORG/NAME[/FOLDER][@REVISION]`` wherever a bundle's
folder is asked for (``load_model``, every command's ``--model``, ``psp serve --model``).

The repository's files (its ``FOLDER`` only, when one is named) are fetched by
``huggingface_hub.snapshot_download`` (the optional extra ``hub``), so everything it honours
holds: its cache (``HF_HOME``, ``HF_HUB_CACHE``), ``HF_HUB_OFFLINE=1`` (the cache only, no
network), ``HF_TOKEN`` for private repositories, ``HF_ENDPOINT`` for a mirror. A model already
in the cache loads without the network when the Hub cannot be reached. The folder then loads as
any bundle (its checksums verified). A repository that holds a sentence-transformers or
model2vec export instead is named as such: those load with their own libraries.
"""

from __future__ import annotations

import re
from pathlib import Path

from psp_core.extras import require

PREFIX = "hf://"
#: what every command's --model help says
MODEL_HELP = "model bundle directory, or hf://ORG/NAME[@REVISION] on the Hugging Face Hub"
#: ORG/NAME as the Hub spells repository ids; an optional folder inside; an optional @REVISION
_HUB_ID = re.compile(
    r"^hf://(?P<repo>[\w.-]+/[\w.-]+)(?:/(?P<folder>[\w./-]+?))?/?(?:@(?P<revision>[^@\s]+))?$"
)


class HubError(ValueError):
    """A model could not be fetched from the Hub (or its cache); the message says why."""


def is_hub_id(path: object) -> bool:
    """Whether ``path`` names a model on the Hub (``hf://...``)."""
    return isinstance(path, str) and path.startswith(PREFIX)


def parse_hub_id(model_id: str) -> tuple[str, str | None, str | None]:
    """``hf://ORG/NAME[/FOLDER][@REVISION]`` -> ``(ORG/NAME, FOLDER or None, REVISION or None)``."""
    found = _HUB_ID.match(model_id)
    if found is None or ".." in (found["folder"] or "").split("/"):
        raise HubError(
            f"{model_id!r} is not a Hub model id: expected hf://ORG/NAME, optionally with a "
            "/FOLDER inside the repository and an @REVISION (a branch, tag or commit)"
        )
    return found["repo"], found["folder"], found["revision"]


def hub_folder(model_id: str, revision: str | None = None) -> Path:
    """The local folder of ``model_id``'s bundle, fetched into (or found in) the Hub cache.
    ``revision`` (a branch, tag or commit) may also be given as ``@REVISION`` in the id, not
    both ways differently."""
    repo, folder, named = parse_hub_id(model_id)
    if revision is not None and named is not None and revision != named:
        raise HubError(f"{model_id}: revision {revision!r} given besides @{named}")
    revision = revision or named
    hub = require("huggingface_hub", "hub", f"loading {model_id}")
    from huggingface_hub import errors

    patterns = [f"{folder}/*"] if folder else None
    try:
        snapshot = hub.snapshot_download(
            repo, revision=revision, allow_patterns=patterns, library_name="psp-pipeline"
        )
    except errors.RevisionNotFoundError as error:
        raise HubError(f"{model_id}: the Hub has no revision {revision!r} of {repo}") from error
    except errors.RepositoryNotFoundError as error:
        raise HubError(
            f"{model_id}: the Hub has no model repository {repo} (or it is private: set HF_TOKEN)"
        ) from error
    except errors.LocalEntryNotFoundError as error:
        where = (
            "HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set"
            if _offline()
            else "the Hub could not be reached"
        )
        raise HubError(
            f"{model_id}: not in the Hugging Face cache and {where} ({_first_line(error)})"
        ) from error
    except (errors.HfHubHTTPError, OSError) as error:
        raise HubError(f"{model_id}: fetching from the Hub failed: {_first_line(error)}") from error
    path = Path(snapshot) / folder if folder else Path(snapshot)
    _check_is_bundle(model_id, path)
    return path


def _check_is_bundle(model_id: str, path: Path) -> None:
    if (path / "config.json").is_file() and (path / "sentencepiece.model").is_file():
        return
    if (path / "modules.json").is_file():
        raise HubError(
            f"{model_id} is a sentence-transformers model, not a psp bundle: load it with "
            "sentence_transformers.SentenceTransformer"
        )
    if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
        raise HubError(
            f"{model_id} is a model2vec model, not a psp bundle: load it with "
            "model2vec.StaticModel.from_pretrained"
        )
    if not path.is_dir():
        raise HubError(f"{model_id}: the repository has no folder {path.name!r}")
    raise HubError(
        f"{model_id}: not a psp model bundle (no config.json and sentencepiece.model there)"
    )


def _offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def model_folder(path: str | Path, revision: str | None = None) -> Path:
    """The local folder of a model: ``path`` itself, or a Hub id's fetched folder."""
    if is_hub_id(path):
        return hub_folder(str(path), revision)
    if revision is not None:
        raise ValueError(f"revision {revision!r} is for Hub models (hf://ORG/NAME), not {path}")
    return Path(path)
