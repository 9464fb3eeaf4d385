"""Test-session settings: the on-disk compile cache goes to a fresh folder, so tests neither
read a developer's cache nor leave entries in it."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    patch.setenv("TILEC_CACHE_DIR", str(tmp_path_factory.mktemp("tilec-cache")))
    yield
    patch.undo()
