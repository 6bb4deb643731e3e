"""Evidence tests sign checkpoints with a key of their own, never the user's default key."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ringfence.evidence.checkpoint import KEY_ENV


@pytest.fixture(scope="session", autouse=True)
def evidence_signing_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One signing key for the session (stores copied between tests must keep verifying)."""
    key = str(tmp_path_factory.mktemp("evidence-key") / "signing.key")
    old = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = key
    yield key
    if old is None:
        os.environ.pop(KEY_ENV, None)
    else:
        os.environ[KEY_ENV] = old
