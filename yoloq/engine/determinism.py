"""Make every epoch a pure function of (weights, optimizer state, seed, epoch).

An uninterrupted run carries RNG streams, the mosaic image buffer and the data
loader's iterator from one epoch into the next; a resumed process starts them
afresh. Resetting all of them at every epoch start, in both kinds of run, is
what makes a resumed run bit-identical. No torch import at module level, so the
pure parts stay cheap to test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class EpochSeeds:
    """Independent seeds for each RNG the training loop draws from."""

    python: int
    numpy: int
    torch: int
    loader: int


def epoch_seeds(seed: int, epoch: int) -> EpochSeeds:
    """Derive the seeds for 0-based `epoch` of a job seeded with `seed`.

    SeedSequence mixes (seed, epoch) so neighbouring epochs or seeds never share
    streams; each value fits every consumer (numpy needs < 2**32).
    """
    words = np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(epoch)]).generate_state(4)
    python, numpy_seed, torch_seed, loader = (int(w) for w in words)
    return EpochSeeds(python=python, numpy=numpy_seed, torch=torch_seed, loader=loader)


def apply_seeds(seeds: EpochSeeds, loader_generator: Any | None = None) -> None:
    """Reseed Python, numpy, torch (CPU and every CUDA device) and the loader's generator."""
    import torch

    random.seed(seeds.python)
    np.random.seed(seeds.numpy)
    torch.manual_seed(seeds.torch)  # also seeds all CUDA devices
    if loader_generator is not None:
        loader_generator.manual_seed(seeds.loader)


def clear_mosaic_buffer(dataset: Any) -> None:
    """Forget the images kept for mosaic, as a freshly built dataset has none.

    The buffer (indices of recently loaded images) and the images it keeps are
    cross-epoch state; mosaic picks partners from it. With `cache="ram"` the
    attribute is the RAM cache itself and every image stays: nothing to reset.
    """
    if getattr(dataset, "cache", None) == "ram":
        return
    buffer = getattr(dataset, "buffer", None)
    if not isinstance(buffer, list):
        return
    for index in buffer:
        dataset.ims[index] = None
        dataset.im_hw0[index] = None
        dataset.im_hw[index] = None
    buffer.clear()
    if isinstance(getattr(dataset, "masks", None), dict):  # semantic segmentation keeps masks with them
        dataset.masks.clear()
