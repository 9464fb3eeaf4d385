"""Test-session settings: the on-disk compile cache goes to a fresh folder, so tests neither
read a developer's cache nor leave entries in it; and the pack kernels' module loads recorded
without a GPU (``loaded_modules``)."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache_dir(tmp_path_factory):
    patch = pytest.MonkeyPatch()
    patch.setenv("TILEC_CACHE_DIR", str(tmp_path_factory.mktemp("tilec-cache")))
    yield
    patch.undo()


@pytest.fixture
def loaded_modules(monkeypatch):
    """The (ptx, name) of each module the pack kernels' loaders load, with loading replaced
    by a stand-in whose functions are their names, and the loaders' cache emptied."""
    import tilec.runtime
    from tilec.launch import packing
    loaded = []

    class Module:
        def function(self, name):
            return name
    monkeypatch.setattr(tilec.runtime, "load_module",
                        lambda ptx, name: loaded.append((ptx, name)) or Module())
    monkeypatch.setattr(packing, "_FUNCTIONS", {})
    return loaded
