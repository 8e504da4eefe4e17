#!/usr/bin/env python3
"""Splits a `perf record --call-graph dwarf` profile of an Envoy running the native adapter by
who spent each sample: Envoy outside the module's hooks, Envoy called by the module through an
ABI callback (a resume, a callout, a header), or the module's own code (with what it
allocates), the last split into the adapter (`keyflight_filter_native`) and the drivers it
shares with the Wasm filter (`keyflight_filter`, `keyflight_protocol`).

The Envoy that `scripts/envoy.sh` installs is stripped: only what it exports has a name (the
ABI callbacks and the allocator), and those are all the module calls. So the Envoy frame
right above the module's innermost frame names the callback. An unnamed one is a body reached
by a tail jump: the allocator's slow path when the nearest export below it is the allocator's
(the module's allocations are Envoy's tcmalloc), else a callback's (`continue_decoding` jumps
into Envoy's own resume), named by the module function that called it.

Usage: scripts/envoy-cpu-split.py PERF_DATA ENVOY_BINARY   (filter-native/README.md#where-envoys-cpu-goes)
"""

import bisect
import collections
import subprocess
import sys

ALLOCATOR = ("malloc", "free", "calloc", "realloc", "aligned_alloc", "posix_memalign", "memalign",
             "valloc", "pvalloc", "reallocarray", "mall", "__libc_")
HOOK = "envoy_dynamic_module_on_"
ADAPTER = "keyflight_filter_native"
DRIVERS = ("keyflight_filter::", "keyflight_protocol::")


def exported(envoy):
    """Envoy's exported functions as (start, size, name), sorted, and the shift from the
    addresses perf prints (file offsets) to theirs (virtual addresses)."""
    nm = subprocess.run(["nm", "-D", "-S", "--defined-only", envoy], capture_output=True, text=True, check=True)
    functions = sorted(
        (int(addr, 16), int(size, 16), name)
        for addr, size, kind, name in (line.split() for line in nm.stdout.splitlines() if len(line.split()) == 4)
        if kind in "Tt"
    )
    headers = subprocess.run(["readelf", "-lW", envoy], capture_output=True, text=True, check=True)
    shift = 0
    for line in headers.stdout.splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and "E" in fields[6:-1]:
            shift = int(fields[2], 16) - int(fields[1], 16)
    return functions, shift


def samples(data):
    """Each sample's frames, innermost first, as (kind, name, address)."""
    script = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,tid,period,ip,sym,dso"],
        capture_output=True, text=True, check=True,
    )
    frames = None
    for line in script.stdout.splitlines() + [""]:
        if not line.strip():
            if frames:
                yield frames
            frames = None
        elif not line[0].isspace():
            frames = []
        elif frames is not None:
            address, rest = line.strip().split(" ", 1)
            name, _, dso = rest.rpartition(" (")
            kind = ("envoy" if dso.endswith("/envoy)") else "module" if ADAPTER in dso
                    else "kernel" if "kernel" in dso else "lib")
            frames.append((kind, name, int(address, 16)))


def classify(frames, name_of):
    """(part, detail) of one sample."""
    if not any(kind == "module" and name.startswith(HOOK) for kind, name, _ in frames):
        return "Envoy outside the module's hooks", ""
    above = []
    for kind, name, address in frames:
        if kind == "module":
            caller = name
            break
        if kind == "envoy":
            above.append(name_of(address))
    callback = above[-1] if above else None
    if callback is None or callback.startswith(ALLOCATOR):
        crate = next((c for _, n, _ in frames for c in (ADAPTER, *DRIVERS) if n.startswith(c) or n.startswith("<" + c)), "")
        return "the module's own code", "adapter" if crate == ADAPTER or not crate else "drivers (shared with Wasm)"
    if callback.startswith("envoy_dynamic_module_callback"):
        return "Envoy, called by the module", callback.removeprefix("envoy_dynamic_module_callback_")
    return "Envoy, called by the module", f"a tail-called callback from {caller.split('::{{')[0]}"


def main():
    data, envoy = sys.argv[1:3]
    functions, shift = exported(envoy)
    starts = [start for start, _, _ in functions]

    def name_of(address):
        address += shift
        i = bisect.bisect_right(starts, address) - 1
        start, size, name = functions[i] if i >= 0 else (0, 0, "")
        if start <= address < start + max(size, 1) or name.startswith(ALLOCATOR):
            return name
        return "?"

    parts, details = collections.Counter(), collections.Counter()
    total = 0
    for frames in samples(data):
        part, detail = classify(frames, name_of)
        parts[part] += 1
        details[(part, detail)] += 1
        total += 1
    print(f"{total} samples of Envoy")
    for part, count in parts.most_common():
        print(f"{100 * count / total:5.1f}%  {part}")
        for (p, detail), n in details.most_common():
            if p == part and detail and n * 200 >= total:
                print(f"   {100 * n / total:5.1f}%  {detail}")


if __name__ == "__main__":
    main()
