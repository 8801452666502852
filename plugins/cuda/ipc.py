"""CUDA IPC through the driver API (ctypes on libcuda), for the runner's outputs: the runner names where each of its
outputs lies (`BatchDone.outputs`), the judge opens the allocation itself, checks the range against the allocation's real
size, and copies the bytes out. No pickle crosses the boundary; a handle is 64 bytes, an offset an integer."""

from __future__ import annotations

import bisect
import ctypes
import functools
import math

import torch


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]


@functools.cache
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_uint64]
    lib.cuIpcGetMemHandle.argtypes = [ctypes.POINTER(_Handle), ctypes.c_uint64]
    lib.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), _Handle, ctypes.c_uint]
    lib.cuIpcCloseMemHandle.argtypes = [ctypes.c_uint64]
    return lib


class IpcError(Exception):
    """A handle that does not open, or memory that is not what it was said to be."""


def allocation(pointer: int) -> tuple[int, int]:
    """(base, size in bytes) of the device allocation that holds `pointer`."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    if code := _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(pointer)):
        raise IpcError(f"cuMemGetAddressRange failed ({code})")
    return base.value, size.value


def export_all(tensors: list[torch.Tensor]) -> tuple[list[str], list[list[int]]]:
    """Runner: the IPC handles (hex) of the allocations that hold `tensors`, and for each tensor [the index of its
    allocation's handle, its byte offset there]. One driver lookup and one handle for each allocation, not each tensor
    (the caching allocator puts many small outputs in one): on the H200 a lookup costs ~3 µs of the judge's clock and a
    handle ~4 µs. The tensors are alive throughout, so a range found for one holds for the others."""
    ranges: list[tuple[int, int, int]] = []  # (base, end, handle index), sorted by base
    handles: list[str] = []
    places = []
    for tensor in tensors:
        pointer = tensor.data_ptr()
        k = bisect.bisect_right(ranges, (pointer, math.inf, math.inf)) - 1
        if k < 0 or not ranges[k][0] <= pointer < ranges[k][1]:
            base, size = allocation(pointer)
            handle = _Handle()
            if code := _driver().cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(base)):
                raise IpcError(f"cuIpcGetMemHandle failed ({code})")
            handles.append(bytes(handle.reserved).hex())
            bisect.insort(ranges, (base, base + size, len(handles) - 1))
            k = bisect.bisect_right(ranges, (pointer, math.inf, math.inf)) - 1
        base, _, index = ranges[k]
        places.append([index, pointer - base])
    return handles, places


def open_handle(handle_hex: str) -> tuple[int, int]:
    """Judge: map the allocation named by `handle_hex`; (its address here, its size). Close it with `close`."""
    raw = bytes.fromhex(handle_hex)
    if len(raw) != 64:
        raise IpcError("an IPC handle is 64 bytes")
    handle = _Handle()
    ctypes.memmove(handle.reserved, raw, 64)
    pointer = ctypes.c_uint64()
    if code := _driver().cuIpcOpenMemHandle_v2(ctypes.byref(pointer), handle, 1):  # 1: lazy peer access
        raise IpcError(f"cuIpcOpenMemHandle failed ({code})")
    try:
        return pointer.value, allocation(pointer.value)[1]
    except IpcError:
        close(pointer.value)
        raise


def close(pointer: int) -> None:
    _driver().cuIpcCloseMemHandle(ctypes.c_uint64(pointer))


class _Memory:
    def __init__(self, pointer: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (pointer, False), "version": 3}


def bytes_at(pointer: int, nbytes: int) -> torch.Tensor:
    """The `nbytes` bytes at device address `pointer` as a uint8 tensor (no copy; valid while the mapping is)."""
    return torch.as_tensor(_Memory(pointer, nbytes), device="cuda")
