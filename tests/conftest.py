import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The workplace's real corpora (SICK, SNLI, SVA, ...): ``PHM_SHARED_DATA`` or ../shared/data.

    Skipped where absent, unless ``PHM_REQUIRE_SHARED_DATA=1`` (CI), where absence is a failure.
    """
    path = Path(os.environ.get("PHM_SHARED_DATA", REPO.parent / "shared" / "data"))
    if not path.is_dir():
        message = f"real corpora not found at {path} (set PHM_SHARED_DATA)"
        if os.environ.get("PHM_REQUIRE_SHARED_DATA") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return path
