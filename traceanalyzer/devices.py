"""What a GPU is, from what the profiler recorded about it: vendor, NVIDIA compute capability,
and the link to the host, so that advice and bandwidth figures fit the device in the trace.

The rules read this through the rule files' ``devices:`` variants (docs/rules.md) and the
memcpy-bound rule through :func:`host_link`. Nothing here guesses silently: an unknown device
gives None or a link marked ``assumed``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traceanalyzer.model import Device

VENDORS = ("nvidia", "amd")


def vendor_of(device: Device | None) -> str | None:
    """``nvidia`` or ``amd``, from the recorded vendor or, failing that, the name."""
    if device is None:
        return None
    if device.vendor in VENDORS:
        return device.vendor
    name = (device.name or "").lower()
    if re.search(r"nvidia|tesla|geforce|quadro|rtx", name):
        return "nvidia"
    if re.search(r"\bamd\b|radeon|instinct|\bmi[0-9]{3}", name):
        return "amd"
    return None


def parse_capability(text: str | float | None) -> tuple[int, int] | None:
    """``"8.9"`` -> (8, 9), ``"10.0"`` -> (10, 0); None for anything else."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*([0-9]{1,2})(?:\.([0-9]{1,2}))?\s*", str(text))
    return (int(m.group(1)), int(m.group(2) or 0)) if m else None


def compute_capability(device: Device | None) -> tuple[int, int] | None:
    """An NVIDIA GPU's compute capability; None when unknown or not an NVIDIA GPU (ROCm traces
    record a gfx version in the same field, which is not comparable)."""
    if device is None or vendor_of(device) != "nvidia":
        return None
    return parse_capability(device.compute_capability)


def describe(device: Device | None) -> str:
    """The device in a few words for a message: "NVIDIA H200 (compute capability 9.0)"."""
    if device is None:
        return "an unrecorded GPU"
    name = device.name or f"GPU {device.id}"
    cc = compute_capability(device)
    return f"{name} (compute capability {cc[0]}.{cc[1]})" if cc else name


@dataclass(frozen=True)
class HostLink:
    """The link between a GPU and its host, with the bandwidth one direction reaches."""

    name: str  # "PCIe Gen5 x16", "NVLink-C2C"
    #: What copies from or to pinned memory reach in practice, GB/s per direction (an H200 on
    #: PCIe Gen5 x16 copied 128 MiB from pinned memory at 55 GB/s).
    practical_gbps: float
    nominal_gbps: float  # the link's rate per direction, which no copy exceeds
    #: True when the trace does not say which GPU it is and the link is a guess.
    assumed: bool = False


PCIE = {
    3: HostLink("PCIe Gen3 x16", 13.0, 15.8),
    4: HostLink("PCIe Gen4 x16", 26.0, 31.5),
    5: HostLink("PCIe Gen5 x16", 55.0, 63.0),
}
NVLINK_C2C = HostLink("NVLink-C2C", 400.0, 450.0)
#: An APU whose CPU and GPU share one HBM: a "host" copy moves data within it.
SHARED_HBM = HostLink("shared HBM (APU)", 400.0, 450.0)

#: Names that say which host link the GPU has (checked in order).
_LINK_BY_NAME: tuple[tuple[str, HostLink], ...] = (
    (r"\bg[hb][0-9]{3}\b", NVLINK_C2C),  # Grace Hopper GH200, Grace Blackwell GB200/GB300
    (r"\bmi300a\b", SHARED_HBM),
    (r"\bmi3[0-9]{2}|\bb[12]00\b|\bh[12]00\b|\bh20\b|\brtx 50[0-9]{2}|rtx pro 6000", PCIE[5]),
    (r"\bmi[12][0-9]{2}|\ba[0-9]{2,3}\b|\brtx 30[0-9]{2}|\brtx 40[0-9]{2}|\bl40|\bl4\b", PCIE[4]),
    (r"\bv100|\bt4\b|\bp100|rtx 20[0-9]{2}|titan v|quadro rtx", PCIE[3]),
)


def host_link(device: Device | None) -> HostLink:
    """The host link of ``device``: from its name, or from the GPU its properties identify
    where the name does not say ("AMD Radeon Graphics" with an MI250's compute units), else
    from its NVIDIA compute capability, else PCIe Gen4 x16, marked ``assumed``."""
    name = ((device.name if device else None) or "").lower()
    known = by_properties(device) if device is not None else None
    for candidate in (name, known.name.lower() if known is not None else ""):
        for pattern, link in _LINK_BY_NAME:
            if candidate and re.search(pattern, candidate):
                return link
    cc = compute_capability(device)
    if cc is not None:
        gen = 3 if cc < (8, 0) else 4 if cc < (9, 0) else 5
        return HostLink(PCIE[gen].name, PCIE[gen].practical_gbps, PCIE[gen].nominal_gbps,
                        assumed=True)
    base = PCIE[4]
    return HostLink(base.name, base.practical_gbps, base.nominal_gbps, assumed=True)


# --- conditions of the rule files' ``devices:`` variants --------------------------------------


@dataclass(frozen=True)
class DeviceCondition:
    """Which devices a rule file's variant is for; every field given must hold.

    ``compute_capability_at_least`` / ``_below`` are NVIDIA's compute capability: they never hold
    for an AMD GPU, nor for a GPU whose capability the trace does not record.
    """

    vendor: str | None = None
    compute_capability_at_least: tuple[int, int] | None = None
    compute_capability_below: tuple[int, int] | None = None

    def matches(self, device: Device | None) -> bool:
        if device is None:
            return False
        if self.vendor is not None and vendor_of(device) != self.vendor:
            return False
        if self.compute_capability_at_least or self.compute_capability_below:
            cc = compute_capability(device)
            if cc is None:
                return False
            if self.compute_capability_at_least and cc < self.compute_capability_at_least:
                return False
            if self.compute_capability_below and cc >= self.compute_capability_below:
                return False
        return True

    def words(self) -> str:
        """The condition for the docs: "NVIDIA GPUs of compute capability below 8.0"."""
        who = {"nvidia": "NVIDIA GPUs", "amd": "AMD GPUs (ROCm)"}.get(self.vendor or "", "GPUs")
        parts = []
        if self.compute_capability_at_least:
            major, minor = self.compute_capability_at_least
            parts.append(f"{major}.{minor} or higher")
        if self.compute_capability_below:
            major, minor = self.compute_capability_below
            parts.append(f"below {major}.{minor}")
        if parts:
            who = "NVIDIA GPUs of compute capability " + " and ".join(parts)
        return who


# --- peak throughput, for the performance model (docs/perf-model.md) --------------------------


@dataclass(frozen=True)
class Peaks:
    """A GPU's dense peak throughput (TFLOP/s, no 2:4 sparsity) and HBM bandwidth (GB/s), from
    its vendor's datasheet; None where the GPU has no such unit (FP8 before Hopper/MI300)."""

    name: str  # the table's name for it: "H100 SXM"
    bf16: float  # dense BF16 (= FP16) tensor-core / matrix-core peak
    fp8: float | None
    tf32: float | None
    fp32: float  # FP32 without tensor cores (NVIDIA: CUDA cores; AMD: FP32 matrix)
    hbm_gbps: float
    source: str  # the datasheet the figures come from
    #: The share of ``hbm_gbps`` a streaming kernel reaches (:data:`REACHABLE_HBM_FRACTION`).
    hbm_reachable_fraction: float = 0.0
    #: What the ``bf16`` figure is the peak of: "BF16" (= FP16), or "FP16" on a GPU without
    #: BF16 tensor cores (Volta), where it is the FP16 tensor-core peak.
    matrix: str = "BF16"

    @property
    def reachable_gbps(self) -> float:
        """The HBM bandwidth a large device-to-device copy reaches, GB/s: what a memory-bound
        kernel can be asked to approach (the datasheet figure is a pin rate no kernel meets)."""
        return self.hbm_gbps * (self.hbm_reachable_fraction or REACHABLE_HBM_FRACTION)


#: The share of the datasheet HBM bandwidth that streaming kernels reach. Measured on this
#: project's H200 (scripts/measure/hbm_bandwidth_h200.json, 2026-12-02: PyTorch copies 4238-4240
#: GB/s, sums 4164-4248, adds and triads 4358-4384 of the 4800 GB/s datasheet figure, bytes read
#: and written counted: 0.87-0.91; the device notes' D2D copy, 4.3 TB/s, agrees), 0.90. The other GPUs were not measured here; they get the same share (their HBM
#: controllers and ECC cost about the same), which ``--peak-bandwidth`` does not change: the
#: rules judge the device in the trace.
REACHABLE_HBM_FRACTION = 0.90

_NV = "https://www.nvidia.com/en-us/data-center/"
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"
_A100 = ("https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
         "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf")
_V100 = ("https://images.nvidia.com/content/technologies/volta/pdf/"
         "volta-v100-datasheet-update-us-1165301-r5.pdf")
#: Datasheet figures, dense (the datasheets' sparse figures halved). Per GPU for the
#: multi-GPU products (HGX B200: the 8-GPU figures / 8; GB200 NVL72: per superchip / 2).
PEAKS: dict[str, Peaks] = {p.name: p for p in (
    Peaks("H100 SXM", 989.4, 1978.9, 494.7, 66.9, 3350.0, _NV + "h100/"),
    Peaks("H100 PCIe", 756.0, 1513.0, 378.0, 51.2, 2000.0, _NV + "h100/"),
    Peaks("H100 NVL", 835.0, 1670.5, 417.5, 60.0, 3900.0, _NV + "h100/"),
    Peaks("H200 SXM", 989.4, 1978.9, 494.7, 66.9, 4800.0, _NV + "h200/"),
    Peaks("H200 NVL", 835.0, 1670.5, 417.5, 60.0, 4800.0, _NV + "h200/"),
    Peaks("H20", 148.0, 296.0, 74.0, 44.0, 4000.0, "NVIDIA H20 product brief (2024)"),
    Peaks("B200", 2250.0, 4500.0, 1125.0, 75.0, 8000.0, _NV + "hgx/"),
    Peaks("GB200", 2500.0, 5000.0, 1250.0, 90.0, 8000.0, _NV + "gb200-nvl72/"),
    Peaks("A100 40GB", 312.0, None, 156.0, 19.5, 1555.0, _A100),
    Peaks("A100 80GB SXM", 312.0, None, 156.0, 19.5, 2039.0, _A100),
    Peaks("A100 80GB PCIe", 312.0, None, 156.0, 19.5, 1935.0, _A100),
    Peaks("L40S", 362.05, 733.0, 183.0, 91.6, 864.0, _NV + "l40s/"),
    Peaks("L4", 121.0, 242.5, 60.0, 30.3, 300.0, _NV + "l4/"),
    Peaks("A10G", 70.0, None, 35.0, 31.2, 600.0, "https://aws.amazon.com/ec2/instance-types/g5/"),
    # Volta has FP16 tensor cores only: no BF16, TF32 or FP8; its "bf16" figure is FP16's.
    Peaks("V100 SXM2", 125.0, None, None, 15.7, 900.0, _V100, matrix="FP16"),
    Peaks("V100 PCIe", 112.0, None, None, 14.0, 900.0, _V100, matrix="FP16"),
    Peaks("V100S PCIe", 130.0, None, None, 16.4, 1134.0, _V100, matrix="FP16"),
    Peaks("MI300X", 1307.4, 2614.9, 653.7, 163.4, 5300.0, _AMD + "mi300/mi300x.html"),
    Peaks("MI325X", 1307.4, 2614.9, 653.7, 163.4, 6000.0, _AMD + "mi300/mi325x.html"),
    # An MI250X or MI250 is two dies (GCDs) that ROCm shows as two devices: a trace's device is
    # one of them, with half the card's datasheet figures.
    Peaks("MI250X GCD", 191.5, None, None, 47.9, 1638.4, _AMD + "mi200/mi250x.html (card / 2)"),
    Peaks("MI250 GCD", 181.0, None, None, 45.3, 1638.4, _AMD + "mi200/mi250.html (card / 2)"),
    Peaks("MI210", 181.0, None, None, 45.3, 1638.4, _AMD + "mi200/mi210.html"),
)}

#: Device names as profilers record them -> the table's entry (checked in order, lowercased).
_PEAKS_BY_NAME: tuple[tuple[str, str], ...] = (
    (r"\bgb200\b", "GB200"),
    (r"\bb200\b", "B200"),
    (r"\bh200\b.*\bnvl\b", "H200 NVL"),
    (r"\bh200\b", "H200 SXM"),
    (r"\bh100\b.*\bnvl\b", "H100 NVL"),
    (r"\bh100\b.*\bpcie\b", "H100 PCIe"),
    (r"\bh100\b", "H100 SXM"),
    (r"\bh20\b", "H20"),
    (r"\ba100\b.*80\s*gb.*pcie|\ba100\b.*pcie.*80\s*gb", "A100 80GB PCIe"),
    (r"\ba100\b.*80\s*gb", "A100 80GB SXM"),
    (r"\ba100\b", "A100 40GB"),
    (r"\bl40s\b", "L40S"),
    (r"\bl4\b", "L4"),
    (r"\ba10g\b", "A10G"),
    (r"\bv100s\b", "V100S PCIe"),
    (r"\bv100\b.*\bpcie\b", "V100 PCIe"),
    (r"\bv100\b", "V100 SXM2"),
    (r"\bmi325x?\b", "MI325X"),
    (r"\bmi300x?\b", "MI300X"),
    (r"\bmi250x\b", "MI250X GCD"),
    (r"\bmi250\b", "MI250 GCD"),
    (r"\bmi210\b", "MI210"),
)

#: AMD GPUs by what ROCm records when the name does not say (an empty name, "AMD Radeon
#: Graphics"): (gfx major.minor as computeMajor/Minor, compute units, the least memory in GiB)
#: -> the table's entry. gfx90a with 110 CUs is an MI250X GCD, with 104 an MI250 GCD or an MI210
#: (the same figures); gfx942 with 304 CUs an MI300X (192 GiB) or MI325X (256 GiB).
_AMD_BY_PROPERTIES: tuple[tuple[str, int, int, str], ...] = (
    ("9.4", 304, 250, "MI325X"),
    ("9.4", 304, 0, "MI300X"),
    ("9.0", 110, 0, "MI250X GCD"),
    ("9.0", 104, 0, "MI250 GCD"),
)


def peaks_of(device: Device | None) -> Peaks | None:
    """The peak table's entry for ``device``, from its recorded name, else (an AMD GPU whose
    name does not say which) from its gfx version, compute units and memory; None when
    unknown."""
    name = ((device.name if device else None) or "").lower()
    for pattern, key in _PEAKS_BY_NAME:
        if re.search(pattern, name):
            if key == "MI250X GCD" and device is not None and device.sm_count == 104:
                return PEAKS["MI250 GCD"]  # ROCm names both "AMD Instinct MI250X/MI250"
            return PEAKS[key]
    return by_properties(device)


def by_properties(device: Device | None) -> Peaks | None:
    """An AMD GPU's table entry from its recorded properties (:data:`_AMD_BY_PROPERTIES`)."""
    if device is None or vendor_of(device) != "amd" or device.sm_count is None:
        return None
    gib = (device.memory_bytes or 0) / 2**30
    for gfx, cus, min_gib, key in _AMD_BY_PROPERTIES:
        if device.compute_capability == gfx and device.sm_count == cus and gib >= min_gib:
            return PEAKS[key]
    return None


def identified(device: Device | None) -> str | None:
    """Where the name does not say which GPU it is but its properties do, in words for the
    device line: "MI300X by its 304 compute units, gfx 9.4 and 192 GiB"."""
    if device is None:
        return None
    name = (device.name or "").lower()
    if any(re.search(pattern, name) for pattern, _ in _PEAKS_BY_NAME):
        return None
    peaks = by_properties(device)
    if peaks is None:
        return None
    gib = (device.memory_bytes or 0) / 2**30
    return (f"{peaks.name} by its {device.sm_count} compute units, gfx "
            f"{device.compute_capability} and {gib:.0f} GiB")
