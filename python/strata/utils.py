"""strata.utils: keras.utils.set_random_seed over strata's per-thread generator.
Thread-safety: seeds the calling thread's generator only (the one fit draws its initial weights from)."""

from ._strata import set_random_seed

__all__ = ["set_random_seed"]
