"""Synthetic float samples drawn when they are read (issue 26 item 3): a stack of N samples
that holds one, so calibrating on N synthetic samples of a large input costs the memory of
one sample and the Observer's histograms, whatever N.

Sample i is the i-th `standard_normal(shape)` draw of a generator started from a saved state:
the numbers an eager stack of the same seed held, so calibration ranges do not move."""

from __future__ import annotations

import numpy as np


class DrawnStack:
    """`count` samples of `sample_shape` ~ N(0, 1) in `dtype`, read as an ndarray stack is read
    (`stack[i, ...]`, `stack[a:b]`, `stack.shape`, `np.asarray(stack)`). Reading in order draws
    once per sample; the last sample is kept, so two readers walking together (the float and
    the quantised model over the held-out samples) draw each once; reading backwards restarts
    the generator and skips."""

    def __init__(self, state: dict, sample_shape: tuple[int, ...], dtype, count: int, offset: int = 0):
        self._state = state
        self.sample_shape = tuple(sample_shape)
        self.dtype = np.dtype(dtype)
        self._count = count
        self._offset = offset
        self._rng: np.random.Generator | None = None
        self._next = 0  # the absolute index the generator draws next
        self._last: tuple[int, np.ndarray] | None = None

    def identity(self) -> str:
        """What fixes every number this stack reads (the generator's state, the sample shape,
        dtype, count and offset): a key for memoising on its values without drawing them."""
        return repr((self._state, self.sample_shape, self.dtype.str, self._count, self._offset))

    @property
    def shape(self) -> tuple[int, ...]:
        return (self._count, *self.sample_shape)

    @property
    def ndim(self) -> int:
        return 1 + len(self.sample_shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, key):
        if isinstance(key, tuple) and len(key) == 2 and key[1] is Ellipsis:
            key = key[0]
        if isinstance(key, slice):
            start, stop, step = key.indices(self._count)
            if step != 1:
                raise IndexError("a drawn stack is sliced with step 1 only")
            count, offset = max(0, stop - start), self._offset + start
            return DrawnStack(self._state, self.sample_shape, self.dtype, count, offset)
        if isinstance(key, (int, np.integer)):
            index = int(key) + (self._count if key < 0 else 0)
            if not 0 <= index < self._count:
                raise IndexError(f"sample {int(key)} of {self._count}")
            return self._draw(self._offset + index)
        raise TypeError(f"a drawn stack is indexed by a sample number or a slice, not {key!r}")

    def _draw(self, absolute: int) -> np.ndarray:
        if self._last is not None and self._last[0] == absolute:
            return self._last[1]
        if self._rng is None or absolute < self._next:
            bits = np.random.PCG64()
            bits.state = self._state
            self._rng, self._next = np.random.Generator(bits), 0
        while self._next < absolute:
            self._rng.standard_normal(self.sample_shape)
            self._next += 1
        value = self._rng.standard_normal(self.sample_shape).astype(self.dtype)
        self._next += 1
        self._last = (absolute, value)
        return value

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        stack = np.empty(self.shape, self.dtype)
        for index in range(self._count):
            stack[index] = self[index]
        return stack if dtype is None else stack.astype(dtype)
