"""specverify: byte-exact differential testing of the kernels around speculative decoding."""
import os as _os

__version__ = "0.1.0"

# pyproject.toml installs the checkout's top-level oracles/ and kernels/ folders as specverify.oracles
# and specverify.kernels. When specverify is imported straight from a checkout (PYTHONPATH=., or the
# checkout's root first on sys.path), the same mapping is made here.
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "oracles")) and all(
        _os.path.isdir(_os.path.join(_root, d)) for d in ("oracles", "kernels")):
    __path__.append(_root)
