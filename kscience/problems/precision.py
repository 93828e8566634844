"""What precision a correct answer must have: the two policies of `--precision`, the rule that marks a
kernel as computing at reduced precision, and the one text that states both to the model.

Every verdict records, per checked shape, the candidate's largest error against a float64 evaluation of the
reference on the judge's own inputs, next to the largest error of the reference as published (fp32, or the
problem's own dtypes) against the same float64 answer (kscience.evaluate.judge.checking measures them). The
fastest fp32 GEMMs of a KernelBench trial quantised to fp8 or cast to bf16 and still passed KernelBench's
tolerance; KernelBench-Hard found every fp8 "win" of its first round to be such a downcast. So:

* `tolerance` (the default, as KernelBench judges): an output within the problem's rtol/atol is correct;
  a reduced-precision kernel passes and is marked as such wherever its verdict is shown;
* `reference`: a kernel must also be as precise as the reference, so a reduced-precision kernel is a
  wrong answer, which the repairer is told.

The judge reads POLICIES and the rule (REDUCED_FACTOR, FLOOR) from here, and the prompts read `policy_text`
(kscience/scientist/rules.py), so what the model is told is what the judge does.
"""

from __future__ import annotations

import math

from kscience.problems.spec import ProblemError

POLICIES = ("tolerance", "reference")
DEFAULT_POLICY = "tolerance"
# Reduced precision: the candidate's largest error against float64 is more than REDUCED_FACTOR times the
# reference's own, and more than FLOOR of the output's largest magnitude. The factor separates another order
# of fp32 arithmetic (errors within a few times the reference's) from TF32, bf16, fp8 or an approximate
# intrinsic (hundreds to thousands of times it, where the reference is fp32); the floor keeps an error no
# user would notice from being marked where the reference's own is next to zero.
REDUCED_FACTOR = 10.0
FLOOR = 1e-5
RULE = (f"reduced precision: the largest error against a float64 evaluation of the reference is more than "
        f"{REDUCED_FACTOR:g}x the reference's own and more than {FLOOR:g} of the output's largest magnitude")


def check_policy(policy: str) -> None:
    """A policy this module does not know is the request's error, as a malformed tolerance is."""
    if policy not in POLICIES:
        raise ProblemError(f"unknown precision policy {policy!r}: use {', '.join(POLICIES)}")


def reduced(err: float | None, ref_err: float | None, scale: float | None) -> bool:
    """Whether one shape's errors (candidate and reference against float64, and the largest |float64 answer|)
    mark reduced precision; False where they were not measured."""
    if err is None or ref_err is None or scale is None:
        return False
    return err > REDUCED_FACTOR * ref_err and err > FLOOR * scale


def _get(shape, name: str):
    return shape.get(name) if isinstance(shape, dict) else getattr(shape, name, None)


def summary(shapes) -> dict:
    """A verdict's precision from its checked shapes (ShapeResults or their dicts): {"measured": shapes with
    both errors, "reduced": bool, "worst": the shape whose error is the largest multiple of the reference's,
    with "err", "ref_err", "scale" and "ratio", "skipped": why no shape was measured}; {} when none was
    checked (a verdict stored before errors were measured, or one that failed before any check)."""
    measured, notes = [], []
    for s in shapes or []:
        err, ref_err, scale = _get(s, "err_f64"), _get(s, "ref_err_f64"), _get(s, "scale_f64")
        if err is not None and ref_err is not None:
            ratio = err / ref_err if ref_err > 0 else (math.inf if err > 0 else 1.0)
            measured.append({"shape": _get(s, "shape") or {}, "err": err, "ref_err": ref_err, "scale": scale,
                             "ratio": ratio, "reduced": reduced(err, ref_err, scale)})
        elif _get(s, "f64_note"):
            notes.append(_get(s, "f64_note"))
    if not measured:
        return {"measured": 0, "reduced": False, "skipped": notes[0]} if notes else {}
    worst = max(measured, key=lambda m: (m["reduced"], m["ratio"]))
    return {"measured": len(measured), "reduced": any(m["reduced"] for m in measured), "worst": worst,
            "skipped": ""}


def _errors_text(worst: dict) -> str:
    ratio = worst["ratio"]
    times = "inf" if math.isinf(ratio) else f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.1f}"
    return f"max error {worst['err']:.2e} against float64, {times}x the reference's own {worst['ref_err']:.2e}"


def label(summary_: dict) -> str:
    """One line for a verdict's precision, as `show`, the report and the dashboard print it ("" where none
    was measured)."""
    if not summary_:
        return ""
    if not summary_.get("measured"):
        return f"precision not measured: {summary_['skipped']}"
    text = _errors_text(summary_["worst"])
    return f"REDUCED PRECISION ({text})" if summary_["reduced"] else f"as precise as the reference ({text})"


def rejection(summary_: dict) -> str:
    """The wrong-answer message of a reduced-precision kernel under `--precision reference`."""
    return (f"reduced precision under --precision reference: {_errors_text(summary_['worst'])}; the rule: more "
            f"than {REDUCED_FACTOR:g}x the reference's own error and more than {FLOOR:g} of the output's largest "
            "magnitude")


def policy_text(policy: str, rtol: float, atol: float) -> str:
    """What the model is told of precision for a run under `policy` on a problem checked at `rtol`, `atol`:
    the rule the judge applies (`check_policy`, `reduced`), in words."""
    check_policy(policy)
    within = (f"an output is correct when every element is within rtol={rtol:g}, atol={atol:g} of the reference "
              "(torch.isclose on the same inputs; NaN never is)")
    if policy == "reference":
        return (f"this run demands the reference's precision (--precision reference): {within}, and a kernel whose "
                f"error against a float64 evaluation of the reference is {RULE.removeprefix('reduced precision: ')} "
                "is a wrong answer, so lower-precision arithmetic (bf16, fp16, fp8, TF32) or approximate intrinsics "
                "where the reference computes in fp32 will be rejected")
    return (f"{within}, as KernelBench judges (--precision tolerance); lower-precision arithmetic (bf16, fp16, fp8, "
            "TF32) inside that tolerance passes, but every verdict also measures the error against a float64 "
            f"evaluation of the reference, and a kernel with {RULE.removeprefix('reduced precision: ')} is shown to "
            "the user as reduced precision")
