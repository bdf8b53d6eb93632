"""Tile sizes of the fused output layer's kernels (``fused_ce_kernels``) and, per model width,
the tiles that fit the device or the reason none do. ``choose_tiles`` is pure, so the choice is
tested on CPU; ``fused_ce.kernel_tiles`` applies it with the device's shared-memory limit.

Each of the kernels' three launches keeps one tile of ``R`` rows resident across the padded
width ``BD`` (``block_width(d)``, the whole width in one tile) and streams tiles of ``S`` rows
through ``stages`` shared-memory buffers (Triton's software pipeline):

| launch | resident R | streamed S | float32 accumulator |
|---|---|---|---|
| ``lse``: softmax pass without gradients | ``lse_m`` rows of h | ``lse_n`` rows of w | none |
| ``dx``: softmax pass with dL/dh | ``dx_m`` rows of h | ``dx_n`` rows of w | R x BD |
| ``dw``: ``grad_w_kernel`` | ``dw_n`` rows of w | ``dw_m`` rows of h (and targets) | R x BD |

Shared memory per program: ``itemsize * BD * (R + stages * S)``, plus the streamed targets
(8 bytes a row) of ``dw`` and ``SCRATCH`` for the reductions. Triton's sm_90 builds of the
chosen tiles take at most this (``tests/lm/test_fused_ce.py`` compiles them ahead of time): at
d = 256 the bf16 defaults take 160 KiB of the 227 KiB an H100 or H200 block may use; at d = 768
(BD = 1024) they would take 640 KiB.

``choose_tiles`` on a device:

1. the accumulator tiles keep at most ``ACC_ENTRIES`` float32 entries (the defaults' 128 rows
   x 256, what 8 warps hold in registers), so they shrink as the width grows: 64 rows at
   BD = 512 (whose dx build spills a few dozen bytes a thread). A width that would need fewer
   than ``MIN_ACC_ROWS`` has no tiles: narrower tiles leave Hopper's warpgroup instructions for
   ones that copy the resident rows into every warp's registers, and their sm_90 builds at a
   ragged width spill 1-2 KiB a thread at BD = 512 and 1024;
2. while a launch's estimate exceeds the device's limit: its streamed tile halves (to 16 rows),
   then its stages drop (to 2), then its resident tile halves (to 16 rows); a launch that still
   does not fit has no tiles;
3. a width and vocabulary past the kernels' 32-bit offsets have no tiles.

Without tiles the trainer computes the logits densely (``pillm.lm.train_step``) and the op
with torch operations (``fused_ce``), each saying why in one line. At widths up to 256 on an
H100 or H200 the choice is the defaults themselves (what the paper configuration runs).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pillm.accel.kernels import block_width

# Resident rows x padded width of an accumulator tile: the defaults' 128 x 256
ACC_ENTRIES = 128 * 256
MIN_ACC_ROWS = 64  # one warpgroup's tile (Hopper's wgmma instructions)
MIN_TILE = 16  # tl.dot's smallest dimension
MIN_STAGES = 2  # software pipelining kept where shared memory allows
SCRATCH = 1024  # bytes beside the tiles: the reductions' scratch in the sm_90 builds
TARGET_BYTES = 8  # a streamed row's int64 target (grad_w_kernel)
MAX_OFFSET = 2**31  # the kernels index with 32-bit offsets
# launch -> (resident tile field, streamed tile field, stages field, accumulates, bytes a
# streamed row brings beside its tile row)
LAUNCHES = {
    "lse": ("lse_m", "lse_n", "lse_stages", False, 0),
    "dx": ("dx_m", "dx_n", "dx_stages", True, 0),
    "dw": ("dw_n", "dw_m", "dw_stages", True, TARGET_BYTES),
}


@dataclass(frozen=True)
class Blocks:
    """Tile sizes, warps and pipeline stages of the kernels' three launches (rows x vocabulary;
    the width is one tile). The defaults build for an H100 without register spills at d = 256
    (tests compile them); ``benchmarks/output_layer_speed.py --blocks`` times other settings."""

    lse_m: int = 128  # the softmax pass without gradients: rows, vocabulary tile, warps
    lse_n: int = 64  # 128 needs 256 KiB of shared memory once Triton specializes the pointers
    lse_warps: int = 8
    lse_stages: int = 3  # software pipelining of the streamed tiles (3 beats 2 on an H100)
    dx_m: int = 128  # the softmax pass with dL/dh
    dx_n: int = 64
    dx_warps: int = 8
    dx_stages: int = 3
    dw_m: int = 64  # grad_w_kernel: rows per step, vocabulary rows per program
    dw_n: int = 128
    dw_warps: int = 8
    dw_stages: int = 3
    waves: int = 1  # slices are added until the programs fill this many waves of the SMs
    # (1 beats 2 and 4 at 4,096 and 32,768 rows on an H100: benchmarks/output_layer_speed.py
    # --blocks compares settings)

    def for_itemsize(self, itemsize: int) -> Blocks:
        """float32 operands take twice the shared memory: tiles of at most 64."""
        if itemsize <= 2:
            return self
        small = ("lse_m", "lse_n", "dx_m", "dx_n", "dw_m", "dw_n")
        return replace(self, **{k: min(64, getattr(self, k)) for k in small})

    @classmethod
    def parse(cls, text: str) -> Blocks:
        """'dx_m=64,dx_warps=4' -> Blocks with those fields changed (benchmarks, tuning)."""
        fields = {}
        for item in filter(None, text.split(",")):
            key, _, value = item.partition("=")
            if key not in cls.__dataclass_fields__ or not value.isdigit():
                raise ValueError(f"fused CE blocks {text!r}: expected key=int pairs of "
                                 f"{', '.join(cls.__dataclass_fields__)}")  # fmt: skip
            fields[key] = int(value)
        return cls(**fields)


@dataclass(frozen=True)
class TileChoice:
    """The kernels' tiles at one width on one device; ``blocks`` None: none fit (``reason``)."""

    blocks: Blocks | None
    reason: str = ""  # why the tiles differ from the ones asked for, or why there are none

    @property
    def fused(self) -> bool:
        return self.blocks is not None


def shared_bytes(b: Blocks, launch: str, d: int, itemsize: int) -> int:
    """Shared memory one program of ``launch`` (a key of LAUNCHES) takes at width ``d``."""
    resident, streamed, stages, _, extra = LAUNCHES[launch]
    rows, per = getattr(b, resident), getattr(b, streamed)
    bufs = getattr(b, stages)
    return itemsize * block_width(d) * (rows + bufs * per) + bufs * per * extra + SCRATCH


def _fit(b: Blocks, launch: str, d: int, itemsize: int, limit: int) -> Blocks:
    """``b`` with ``launch``'s tiles shrunk until they fit ``limit`` bytes, or to the smallest
    tiles (which the caller finds still over the limit)."""
    resident, streamed, stages, _, _ = LAUNCHES[launch]
    while shared_bytes(b, launch, d, itemsize) > limit:
        if getattr(b, streamed) > MIN_TILE:
            b = replace(b, **{streamed: getattr(b, streamed) // 2})
        elif getattr(b, stages) > MIN_STAGES:
            b = replace(b, **{stages: getattr(b, stages) - 1})
        elif getattr(b, resident) > MIN_TILE:
            b = replace(b, **{resident: getattr(b, resident) // 2})
        else:
            break
    return b


def choose_tiles(
    d: int, vocab: int, itemsize: int, shared_limit: int | None, blocks: Blocks
) -> TileChoice:
    """The tiles of the kernels at width ``d`` for ``vocab`` classes and operands of
    ``itemsize`` bytes, on a device whose blocks may use ``shared_limit`` bytes of shared
    memory (None: no limit, the Triton interpreter), starting from ``blocks`` (the module
    docstring gives the rules). Pure: the same arguments give the same choice."""
    if vocab * d >= MAX_OFFSET:
        return TileChoice(None, f"{vocab} classes x width {d} overflow the kernels' 32-bit "
                                "offsets")  # fmt: skip
    b = blocks.for_itemsize(itemsize)
    if shared_limit is None:
        return TileChoice(b)
    bd = block_width(d)
    for resident, _, _, accumulates, _ in LAUNCHES.values():
        if accumulates and getattr(b, resident) * bd > ACC_ENTRIES:
            rows = ACC_ENTRIES // bd
            if rows < MIN_ACC_ROWS:
                return TileChoice(None, f"at width {d} (padded to {bd}) the gradient "
                                        f"launches' float32 accumulator holds {rows} rows in "
                                        f"registers, fewer than the {MIN_ACC_ROWS} of a "
                                        "warpgroup's tile")  # fmt: skip
            b = replace(b, **{resident: rows})
    for launch in LAUNCHES:
        b = _fit(b, launch, d, itemsize, shared_limit)
        if (need := shared_bytes(b, launch, d, itemsize)) > shared_limit:
            return TileChoice(None, f"at width {d} the {launch} launch needs {need // 1024} KiB "
                                    f"of shared memory at its smallest tiles, the device "
                                    f"allows {shared_limit // 1024} KiB")  # fmt: skip
    base, changed = blocks.for_itemsize(itemsize), []
    for launch, fields in LAUNCHES.items():
        was = tuple(getattr(base, f) for f in fields[:3])
        now = tuple(getattr(b, f) for f in fields[:3])
        if was != now:
            changed.append(f"{launch} {was} -> {now}")
    reason = (
        f"width {d}: tiles (resident, streamed, stages) {'; '.join(changed)}" if changed else ""
    )
    return TileChoice(b, reason)
