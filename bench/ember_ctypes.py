"""What the bench/*_vs_torch.py scripts share: ember's shared library driven through ctypes
beside torch in one process, and the interleaved timing of two callables.

The scripts import it from their own folder (they run as `/usr/bin/python3 bench/X.py BUILD`).
"""
import ctypes
import os
import statistics
import time

P = ctypes.c_void_p
PP = ctypes.POINTER(ctypes.c_void_p)
I64P = ctypes.POINTER(ctypes.c_int64)

EM_F32, EM_I64, EM_BOOL = 0, 4, 9  # em_dtype (include/ember/ember.h)



def torch_threads(torch, n):
    """torch.set_num_threads(n), and the same count for the OpenBLAS that torch calls for its
    matmuls: torch.set_num_threads does not reach it, and OpenBLAS left alone runs one thread
    a core (with set_num_threads(1), torch's mm used both cores of a 2-core machine). Every
    OpenBLAS mapped into the process is set through openblas_set_num_threads; returns the
    counts they report."""
    torch.set_num_threads(n)
    counts = []
    seen = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            name = os.path.basename(path)
            if path in seen or not (name.startswith("libopenblas") or name.startswith("libblas")):
                continue
            seen.add(path)
            try:
                blas = ctypes.CDLL(path)
                blas.openblas_set_num_threads(ctypes.c_int(n))
                counts.append(blas.openblas_get_num_threads())
            except (OSError, AttributeError):
                pass
    return counts

class Device(ctypes.Structure):
    _fields_ = [("backend", ctypes.c_int), ("index", ctypes.c_int), ("autodiff", ctypes.c_bool),
                ("checkpointing", ctypes.c_int)]


def load(build, argtypes=()):
    """libember.so of BUILD with the argument types of the calls every script makes, and of
    ARGTYPES (pairs of a function's name and its argument types)."""
    lib = ctypes.CDLL(os.path.join(build, "libember.so"))
    lib.em_device_parse.argtypes = [ctypes.c_char_p, ctypes.POINTER(Device)]
    lib.em_tensor_from_data.argtypes = [P, ctypes.c_int, I64P, ctypes.c_int, Device, PP]
    lib.em_tensor_release.argtypes = [P]
    lib.em_last_error.restype = ctypes.c_char_p
    for name, types in argtypes:
        getattr(lib, name).argtypes = types
    return lib


class Ember:
    """A loaded libember.so with its devices by name ("cpu", "ref", "cpu+autodiff")."""

    def __init__(self, lib, device="cpu"):
        self.lib = lib
        self.devs = {}
        self.dev = self.device(device)

    def device(self, name):
        if name not in self.devs:
            d = Device()
            self.check(self.lib.em_device_parse(name.encode(), ctypes.byref(d)))
            self.devs[name] = d
        return self.devs[name]

    def check(self, status):
        if status != 0:
            raise RuntimeError("ember: " + self.lib.em_last_error().decode())

    @staticmethod
    def shape(s):
        return (ctypes.c_int64 * len(s))(*s)

    def tensor(self, t, dev=None):
        """An ember tensor holding a copy of torch tensor T (f32, i64 or bool), on DEV (a
        Device or a device's name; the default device when None)."""
        import torch
        t = t.contiguous()
        dt = {torch.float32: EM_F32, torch.int64: EM_I64, torch.bool: EM_BOOL}[t.dtype]
        if dev is None:
            dev = self.dev
        elif isinstance(dev, str):
            dev = self.device(dev)
        out = ctypes.c_void_p()
        self.check(self.lib.em_tensor_from_data(ctypes.c_void_p(t.data_ptr()), dt,
                                                self.shape(t.shape), t.dim(), dev,
                                                ctypes.byref(out)))
        return out

    def call(self, fn, *args):
        """fn(*args, &out), checked; returns out (the caller releases it)."""
        out = ctypes.c_void_p()
        self.check(fn(*args, ctypes.byref(out)))
        return out

    def run(self, fn, *args):
        """fn(*args, &out), checked, and out released."""
        self.lib.em_tensor_release(self.call(fn, *args))

    def release(self, *tensors):
        for t in tensors:
            self.lib.em_tensor_release(t)


CLOCK = time.perf_counter  # a script may set ember_ctypes.CLOCK = time.process_time


def timed(fn, reps):
    """Seconds per call of fn, over reps calls."""
    t0 = CLOCK()
    for _ in range(reps):
        fn()
    return (CLOCK() - t0) / reps


def rounds_of(a, b, rounds, reps):
    """Seconds per call of a and b in each round, interleaved, which goes first alternating by
    round (one warm-up each)."""
    a(), b()
    ta, tb = [], []
    for r in range(rounds):
        if r % 2:
            tb.append(timed(b, reps)); ta.append(timed(a, reps))
        else:
            ta.append(timed(a, reps)); tb.append(timed(b, reps))
    return ta, tb


def pair(a, b, rounds, reps):
    """Median seconds of a and b, interleaved (one warm-up each), and the best round of each:
    (median a, median b, best a, best b)."""
    ta, tb = rounds_of(a, b, rounds, reps)
    return statistics.median(ta), statistics.median(tb), min(ta), min(tb)
