"""Fixtures for the simulator tests: the built-in VPU targets, and a scratchpad builder that
places arrays in SRAM and runs instructions on them one after another."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc.sim import Dma, End, Instruction, Opcode, SimResult, Simulator
from vpuc.targets import Numerics, Target, load_target

ALIGN_BYTES = 64


@pytest.fixture(scope="session")
def vpu() -> Target:
    return load_target("vpu")


@pytest.fixture(scope="session")
def vpu_plus() -> Target:
    return load_target("vpu-plus")


@pytest.fixture(scope="session")
def vpu_fixed_point(vpu) -> Target:
    return dataclasses.replace(vpu, numerics=Numerics(requant="fixed_point"))


def serialised(instructions: list[Instruction]) -> list[Instruction]:
    """The instructions chained by tokens so each starts after the one before it ends."""
    out = [dataclasses.replace(i, wait=0, signal=0) for i in instructions]
    for pc in range(1, len(out)):
        before, this = out[pc - 1].unit, out[pc].unit
        if before != this:
            token = 1 << (3 * before + this)
            out[pc - 1] = dataclasses.replace(out[pc - 1], signal=out[pc - 1].signal | token)
            out[pc] = dataclasses.replace(out[pc], wait=token)
    return out


class Scratchpad:
    """Arrays placed at 64-byte aligned SRAM addresses; `run` loads them with one DMA, runs
    the instructions in order and returns the SimResult (read outputs with `read`)."""

    def __init__(self) -> None:
        self.image = bytearray()

    def put(self, array: np.ndarray) -> int:
        address = self.reserve(array.nbytes)
        self.image[address : address + array.nbytes] = np.ascontiguousarray(array).tobytes()
        return address

    def reserve(self, nbytes: int) -> int:
        address = -(-len(self.image) // ALIGN_BYTES) * ALIGN_BYTES
        self.image.extend(bytes(address + nbytes - len(self.image)))
        return address

    def run(self, target: Target, instructions: list[Instruction]) -> SimResult:
        load = Dma(opcode=Opcode.LOAD, dram=0, sram=0, row_bytes=max(len(self.image), 1))
        program = serialised([load, *instructions]) + [End()]
        return Simulator(target).run(program, bytes(self.image))

    @staticmethod
    def read(result: SimResult, address: int, shape, dtype) -> np.ndarray:
        count = int(np.prod(shape))
        nbytes = count * np.dtype(dtype).itemsize
        return result.sram[address : address + nbytes].view(dtype).reshape(shape).copy()


@pytest.fixture
def scratchpad() -> Scratchpad:
    return Scratchpad()
