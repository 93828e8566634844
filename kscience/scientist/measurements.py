"""What the loop measures and returns for a plan's kernel, and what a plan may ask for beyond that.

A writer can only return code: a plan that says "report n_regs" or "print the compile error" asks
for something no one carries out. The designer is told instead what every child comes back with,
and asks for the one costly measurement through the plan's `measure` field, which the run supplies
(kscience.run.profile_jobs runs Nsight Compute on that plan's kernel even when it is not a new best).
"""

from __future__ import annotations

# Returned for every judged kernel, unasked.
ALWAYS = (
    "the verdict (correct, or the failing shape and why), with the median time of every benchmark shape",
    "time per launched kernel and call on every timed shape (a profiled pass after the timed calls)",
    "what the kernel printed (stdout/stderr, each distinct line once, Python and Triton warnings included)",
    "compile facts on a GPU: registers per thread, spills, shared memory, warps and stages as compiled, "
    "tensor-core instructions",
    "speed of light per shape against the roofline bound, where the device is known",
)
# What a plan may ask for: name -> what the run then supplies.
ON_REQUEST = {
    "ncu": "Nsight Compute on the shape with the most headroom: top warp-stall reasons, DRAM and L2 throughput, "
           "tensor-pipe use and achieved occupancy (where the judging machine has ncu; the seed and each new best "
           "get it anyway)",
}
ALIASES = {"nsight": "ncu", "nsight compute": "ncu", "stalls": "ncu", "profile: ncu": "ncu", "profile:ncu": "ncu"}


def parse_measure(value) -> list[str]:
    """The known measurements a plan asks for, from its `measure` field (a list or one string); what is
    returned anyway ("per-kernel", "compile facts") and unknown names ask for nothing."""
    items = [value] if isinstance(value, str) else value if isinstance(value, list) else []
    out = []
    for item in items:
        if isinstance(item, str):
            name = ALIASES.get(item.strip().lower(), item.strip().lower())
            if name in ON_REQUEST and name not in out:
                out.append(name)
    return out


def prompt_text() -> str:
    """The designer's section on what comes back and how to ask for more."""
    lines = ["Every kernel a plan produces is judged and comes back with:"]
    lines += [f"- {item}" for item in ALWAYS]
    lines.append("A plan may ask for more in its `measure` list (the run then supplies it with the finding):")
    lines += [f"- \"{name}\": {what}" for name, what in ON_REQUEST.items()]
    lines.append("Nothing else is carried out: a plan's `changes` are code edits only; instructions to print, "
                 "report or inspect something reach no one.")
    return "\n".join(lines)
