"""H200 probe (2026-12-03): can a judge (root) and a runner (another uid) share GPU memory through CUDA IPC both
ways; does a kernel still running in the runner's context delay a tiny kernel of the judge's (the idle probe);
what cgroup v2 offers (freeze latency, cpuset). Prints one line per finding."""
import ctypes, os, subprocess, sys, time, json, pathlib

def cu():
    lib = ctypes.CDLL("libcuda.so.1")
    return lib

class Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]

def export(t):
    lib = cu(); base = ctypes.c_uint64(); size = ctypes.c_size_t()
    assert lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(t.data_ptr())) == 0
    h = Handle(); r = lib.cuIpcGetMemHandle(ctypes.byref(h), base)
    return r, bytes(h.reserved), t.data_ptr() - base.value, size.value

def child(mode):
    import torch
    torch.cuda.init(); x = torch.zeros(1, device="cuda")
    lib = cu()
    if mode == "open":
        spec = json.loads(sys.stdin.readline())
        h = Handle(); h.reserved = bytes.fromhex(spec["h"])
        ptr = ctypes.c_uint64()
        r = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), h, 1)
        print(json.dumps({"open": r, "uid": os.getuid()}), flush=True)
        if r == 0:
            class A:  # read the first float
                __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (ptr.value, False), "version": 3}
            print(json.dumps({"value": float(torch.as_tensor(A(), device="cuda")[0])}), flush=True)
    elif mode == "export":
        t = torch.full((1 << 20,), 7.0, device="cuda"); torch.cuda.synchronize()
        r, h, off, size = export(t)
        print(json.dumps({"r": r, "h": h.hex(), "off": off, "size": size}), flush=True)
        sys.stdin.readline()
    elif mode == "busy":
        ms = float(sys.argv[3])
        cycles = int(ms * 1.98e6)
        torch.cuda._sleep(100); torch.cuda.synchronize()
        sys.stdin.readline()
        torch.cuda._sleep(cycles)  # queued, not waited for
        print("queued", flush=True)
        sys.stdin.readline()

def main():
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        return child(sys.argv[2])
    import torch
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    me = [sys.executable, __file__, "child"]
    # A1: root exports, nobody opens
    t = torch.full((1 << 20,), 3.0, device="cuda"); torch.cuda.synchronize()
    r, h, off, size = export(t)
    p = subprocess.Popen(nobody + me + ["open"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(json.dumps({"h": h.hex()}) + "\n", timeout=120)
    print("A1 root->nobody", r, out.strip().replace("\n", " "), err.strip()[-200:])
    # A2: nobody exports, root opens
    p = subprocess.Popen(nobody + me + ["export"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    spec = json.loads(p.stdout.readline())
    lib = cu(); hh = Handle(); hh.reserved = bytes.fromhex(spec["h"]); ptr = ctypes.c_uint64()
    r2 = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ptr), hh, 1)
    val = None
    if r2 == 0:
        class A:
            __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (ptr.value + spec["off"], False), "version": 3}
        val = float(torch.as_tensor(A(), device="cuda")[0])
        base = ctypes.c_uint64(); sz = ctypes.c_size_t()
        print("A2 range", lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(sz), ptr), sz.value, spec["size"])
        r3 = lib.cuIpcOpenMemHandle_v2(ctypes.byref(ctypes.c_uint64()), hh, 1)
        print("A2 open twice ->", r3)
        print("A2 close", lib.cuIpcCloseMemHandle(ptr))
    p.stdin.write("\n"); p.stdin.flush(); p.wait()
    print("A2 nobody->root", spec["r"], r2, val)
    # B: probe delay behind another context's queued kernel
    probe = torch.zeros(1, device="cuda")
    def probe_ms():
        torch.cuda.synchronize(); t0 = time.perf_counter(); probe.add_(1); torch.cuda.synchronize()
        return (time.perf_counter() - t0) * 1e3
    idle = sorted(probe_ms() for _ in range(50))
    print("B idle probe ms p50 %.4f p90 %.4f max %.4f" % (idle[25], idle[45], idle[-1]))
    for ms in (0.02, 0.05, 0.2, 1.0, 5.0, 30.0):
        p = subprocess.Popen(me + ["busy", str(ms)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3); p.stdin.write("\n"); p.stdin.flush(); p.stdout.readline()
        d = probe_ms()
        p.stdin.write("\n"); p.stdin.flush(); p.wait()
        print(f"B busy {ms} ms in the other context: probe {d:.3f} ms")
    # C: cgroup v2
    root = pathlib.Path("/sys/fs/cgroup")
    print("C controllers", (root / "cgroup.controllers").read_text().strip() if (root / "cgroup.controllers").exists() else "v1?",
          "| subtree", (root / "cgroup.subtree_control").read_text().strip() if (root / "cgroup.subtree_control").exists() else "")
    print("C my cgroup", pathlib.Path("/proc/self/cgroup").read_text().strip())

main()
