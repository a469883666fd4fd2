import os
import uuid

import pytest


@pytest.fixture
def pool_name():
    """A fresh pool name in /dev/shm, removed (with its row file) afterwards."""
    name = f"gphash-pytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    yield name
    for suffix in ("", ".rows"):
        try:
            os.unlink(f"/dev/shm/{name}{suffix}")
        except FileNotFoundError:
            pass
